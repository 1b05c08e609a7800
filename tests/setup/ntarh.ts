// Must run before any route module loads (it patches Next's internals for in-process route testing).
import 'next-test-api-route-handler';
