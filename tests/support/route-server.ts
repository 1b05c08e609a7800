import { createServer, type IncomingMessage, type Server } from 'node:http';

/**
 * A loopback HTTP server that hands each request to the real route handlers of the paths it is
 * given (the tests do not start `next dev`): for scripts that talk HTTP to the service, for the
 * service talking to itself (the local RevenueCat stand-in), and for clients of its streams.
 */
type Handler = (request: Request, context: { params: Promise<Record<string, string>> }) => Promise<Response>;
export type RouteTable = [RegExp, Record<string, unknown>][];

export interface RouteServer {
  url: string;
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<ArrayBuffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const bytes = Buffer.concat(chunks);
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
}

/** Serve `routes` (a path pattern with named groups as params, and a route module) on a free loopback port. */
export async function startRouteServer(routes: RouteTable): Promise<RouteServer> {
  let baseUrl = '';
  const server: Server = createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', baseUrl);
    for (const [pattern, module] of routes) {
      const match = pattern.exec(url.pathname);
      const handler = match && (module[req.method ?? 'GET'] as Handler | undefined);
      if (!match || !handler) continue;
      const params = Object.fromEntries(Object.entries(match.groups ?? {}).map(([key, value]) => [key, decodeURIComponent(value)]));
      const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : await readBody(req);
      const headers = new Headers(Object.entries(req.headers).flatMap(([name, value]) => (typeof value === 'string' ? [[name, value] as [string, string]] : [])));
      // The request's signal ends with the client's connection, as the server's does (a stream's end).
      const gone = new AbortController();
      res.on('close', () => gone.abort());
      const response = await handler(new Request(url, { method: req.method, headers, body, signal: gone.signal }), { params: Promise.resolve(params) });
      res.writeHead(response.status, Object.fromEntries(response.headers));
      // Written as it comes (a server-sent events stream never ends on its own).
      const reader = response.body?.getReader();
      while (reader && !res.destroyed) {
        const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true as const }));
        if (done) break;
        res.write(value);
      }
      if (res.destroyed) await reader?.cancel().catch(() => undefined);
      res.end();
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    url: baseUrl,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
