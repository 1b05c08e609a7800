// The options of an `npm run` command, read the same way by every command: `--help` (or `-h`)
// prints what the command does and its usage, and exits 0; an unknown, repeated-as-wrong-type or
// valueless option prints what was wrong and the usage, and exits 2 (a usage error, as a shell
// expects), before anything is read or written.
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import { DomainError } from '../lib/errors.ts';

export interface CommandHelp {
  /** One line: what the command does. */
  about: string;
  /** `Usage: npm run <name> ...`, as the command's own errors repeat it. */
  usage: string;
  /** Where the command is explained (docs/...). */
  docs: string;
}

export function commandArgs<const O extends ParseArgsOptionsConfig>(help: CommandHelp, options: O, args = process.argv.slice(2)) {
  helpIfAsked(help, args);
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false }).values;
  } catch (error) {
    return usageError(help, (error as Error).message);
  }
}

/**
 * `--help` (or `-h`): what the command does, its usage and where it is explained, then exit 0. For
 * a command that reads its arguments itself (a name, a list of majors, flags of the bench).
 */
export function helpIfAsked(help: CommandHelp, args = process.argv.slice(2)): void {
  if (!args.includes('--help') && !args.includes('-h')) return;
  console.log(`${help.about}\n\n${help.usage}\n\nMore in ${help.docs}.`);
  process.exit(0);
}

/**
 * Why the options' values were refused, in the options' words: a DomainError's problems (one per
 * field of the request the options make, `optionOf` naming its option), or another error's message.
 */
export function optionProblems(error: unknown, optionOf: (field: string) => string = (field) => `--${field}`): string {
  return error instanceof DomainError && error.errors?.length
    ? error.errors.map((problem) => `${optionOf(problem.path)}: ${problem.message}`).join('; ')
    : (error as Error).message;
}

/** An option's value that must be a positive whole number of milliseconds (`--budget-ms 20000`), or a usage error. */
export function milliseconds(help: CommandHelp, option: string, text: string | undefined): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) usageError(help, `--${option} ${text}: a whole number of milliseconds`);
  return value;
}

/** A command that could not do its work (not a usage error): the reason, exit 1. */
export function commandFailed(message: string): never {
  console.error(message);
  process.exit(1);
}

/** A usage error found after the options were read (a missing or malformed value): the message, the usage, exit 2. */
export function usageError(help: CommandHelp, message?: string): never {
  console.error(message ? `${message}\n${help.usage}` : help.usage);
  process.exit(2);
}
