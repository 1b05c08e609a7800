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
  /** What it has received so far, how many of those it verified, and how many different events (`webhook-id`) among those. */
  counts(): Promise<ReceiverCounts>;
  close(): Promise<void>;
}

export interface ReceiverCounts {
  received: number;
  verified: number;
  verifiedEvents: number;
}

type Reply = { url: string } | ReceiverCounts;

export async function startReceiverProcess(secrets: string[]): Promise<ReceiverProcess> {
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, RECEIVER_SECRETS: secrets.join(',') }, stdio: 'inherit' });
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  // Its next message, or an error if it ends first (a receiver that failed to start, or crashed).
  const reply = (): Promise<Reply> => new Promise((resolve, reject) => {
    const onMessage = (message: Reply) => {
      child.off('exit', onExit);
      resolve(message);
    };
    const onExit = (code: number | null, signal: string | null) => {
      child.off('message', onMessage);
      reject(new Error(`the receiver process ended (${signal ?? `exit code ${code}`}) without answering`));
    };
    child.once('message', onMessage);
    child.once('exit', onExit);
  });
  const close = async () => {
    if (exited()) return;
    const ended = once(child, 'exit');
    child.kill();
    await ended;
  };
  const ready = await reply();
  if (!('url' in ready)) {
    await close();
    throw new Error('the receiver process did not say where it listens');
  }
  return {
    url: ready.url,
    pid: child.pid!,
    async counts() {
      const answer = reply();
      child.send('counts');
      const counts = await answer;
      if (!('received' in counts)) throw new Error('the receiver process did not answer its counts');
      return counts;
    },
    close,
  };
}

if (process.send && process.env.RECEIVER_SECRETS && process.argv[1] === fileURLToPath(import.meta.url)) {
  const receiver = await startWebhookReceiver({ secrets: process.env.RECEIVER_SECRETS.split(',') });
  process.send({ url: receiver.url });
  process.on('message', (message) => {
    if (message !== 'counts') return;
    const verified = receiver.received.filter((event) => event.verified);
    const counts: ReceiverCounts = { received: receiver.received.length, verified: verified.length, verifiedEvents: new Set(verified.map((event) => event.id)).size };
    process.send!(counts);
  });
  process.on('disconnect', () => process.exit(0));
}
