// The bench's webhook receiver in a process of its own: its parsing and verifying (every event,
// with the `standardwebhooks` library) run on their own thread, so they never hold up the load
// generator's clock in the bench's process, and their CPU time is its own to report. Run by
// startReceiverProcess() below; RECEIVER_SECRETS holds its secrets, separated by commas.
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { startWebhookReceiver } from './webhook-receiver.ts';

export interface ReceiverProcess {
  url: string;
  pid: number;
  /** What it has received so far, and how many of those it verified. */
  counts(): Promise<{ received: number; verified: number }>;
  close(): Promise<void>;
}

type Reply = { url: string } | { received: number; verified: number };

export async function startReceiverProcess(secrets: string[]): Promise<ReceiverProcess> {
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, RECEIVER_SECRETS: secrets.join(',') }, stdio: 'inherit' });
  const [ready] = (await once(child, 'message')) as [Reply];
  if (!('url' in ready)) throw new Error('the receiver process did not say where it listens');
  return {
    url: ready.url,
    pid: child.pid!,
    async counts() {
      const reply = once(child, 'message') as Promise<[Reply]>;
      child.send('counts');
      const [answer] = await reply;
      if (!('received' in answer)) throw new Error('the receiver process did not answer its counts');
      return answer;
    },
    async close() {
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.kill();
      await exited;
    },
  };
}

if (process.send && process.env.RECEIVER_SECRETS && process.argv[1] === fileURLToPath(import.meta.url)) {
  const receiver = await startWebhookReceiver({ secrets: process.env.RECEIVER_SECRETS.split(',') });
  process.send({ url: receiver.url });
  process.on('message', (message) => {
    if (message === 'counts') process.send!({ received: receiver.received.length, verified: receiver.received.filter((event) => event.verified).length });
  });
  process.on('disconnect', () => process.exit(0));
}
