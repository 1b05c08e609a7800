import { describe, expect, it } from 'vitest';
import { isLocalModeHost } from '../../lib/http/before-next.ts';

/** Which Host names local mode answers (lib/http/before-next.ts): this machine's, never a public one a page could point here. */
describe('isLocalModeHost', () => {
  it.each([
    '127.0.0.1', '127.0.0.1:3000', '192.168.1.20:3000', '10.0.0.5', '[::1]:3000', '[fe80::1]',
    'localhost', 'localhost:3000', 'app.localhost', 'my-laptop', 'my-laptop.local', 'dev.example.test', 'box.home.arpa', 'svc.internal', 'LOCALHOST.',
    'localhost.localdomain', 'devbox.lan', 'shop.my-app.dev:3000',
  ])('serves %s', (host) => {
    expect(isLocalModeHost(host, 'https://shop.my-app.dev')).toBe(true);
  });

  it.each(['rebind.attacker.net', 'rebind.attacker.net:3000', 'localhost.attacker.net', '127.0.0.1.nip.io', 'app.vercel.app', 'my-app.dev', 'abc123.ngrok-free.app', 'evil.com.'])('refuses %s', (host) => {
    expect(isLocalModeHost(host, 'https://shop.my-app.dev')).toBe(false);
  });
});
