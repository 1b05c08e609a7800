// Must run before any route module loads (it patches Next's internals for in-process route testing).
import 'next-test-api-route-handler';
import { afterAll } from 'vitest';
import { closeRouteServers } from '../support/http.ts';

// callRoute keeps one server per route open for the file (tests/support/http.ts).
afterAll(closeRouteServers);
