import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * Where the local service on the embedded database serves, for the `npm run` commands that ask it
 * (`next dev` takes the next free port when 3000 is busy; `-H` binds one address): a Next server
 * writes `<folder>.port`, its pid, port and origin, and removes it as it exits. A file whose process
 * is gone is not believed. (Apart from the folder's lock, `<folder>.lock`, which stays the bare pid
 * every version reads.)
 *
 * Two moments write it. As the server starts (instrumentation.ts), unless another live server has
 * announced itself for the folder: a second `next start` on the same folder, which cannot open it,
 * must not send the commands to itself. And as the server opens the database (lib/db/index.ts,
 * `holdsFolder`): the process that holds the folder is the one to ask, whatever was written before,
 * and a server that started with settings it refused announces itself once they are fixed.
 */
export function announceServedPort(dataDir: string, options: { holdsFolder?: boolean } = {}): void {
  // Next sets NEXT_RUNTIME, and PORT to the port it bound, before the app loads.
  const port = process.env.NEXT_RUNTIME === 'nodejs' ? process.env.PORT?.trim() : undefined;
  if (!port || !/^\d{1,5}$/.test(port)) return;
  const file = portFile(dataDir);
  const origin = servedOrigin(process.env.__NEXT_PRIVATE_ORIGIN, Number(port));
  const contents = origin ? `${process.pid} ${port} ${origin}` : `${process.pid} ${port}`;
  if (readOrNull(file) === contents) return; // announced already (and removed at exit)
  if (!options.holdsFolder && announcedServer(dataDir)) return; // another live server's folder
  try {
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, contents);
  } catch {
    return; // a folder this process cannot write: the commands fall back to BASE_URL or port 3000
  }
  process.once('exit', () => {
    try {
      if (readFileSync(file, 'utf8') === contents) rmSync(file, { force: true });
    } catch {
      // gone already, or another server's now
    }
  });
}

function readOrNull(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}

/**
 * The origin Next says it serves at (`http://localhost:3000`; `http://127.0.0.1:3000` under `-H
 * 127.0.0.1`, where localhost may not answer), when it is one and on the bound port. Next keeps
 * it in a private variable, so anything else falls back to localhost.
 */
function servedOrigin(text: string | undefined, port: number): string | null {
  if (!text) return null;
  try {
    const url = new URL(text);
    return (url.protocol === 'http:' || url.protocol === 'https:') && Number(url.port) === port && url.origin === text ? url.origin : null;
  } catch {
    return null;
  }
}

/** The live server that announced itself for this folder: its pid, port and origin; or null. */
export function announcedServer(dataDir: string): { pid: number; port: number; origin: string } | null {
  const [pidText, portText, originText] = (readOrNull(portFile(dataDir)) ?? '').trim().split(' ');
  const pid = Number(pidText);
  const port = Number(portText);
  if (!Number.isInteger(pid) || pid <= 0 || !Number.isInteger(port) || port < 1 || port > 65_535) return null;
  const origin = servedOrigin(originText, port) ?? `http://localhost:${port}`;
  return pid !== process.pid && isAlive(pid) ? { pid, port, origin } : null;
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const portFile = (dataDir: string) => `${dataDir}.port`;
