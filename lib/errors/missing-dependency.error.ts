import { OutboxError } from './outbox.error';

/** An optional peer dependency needed by the chosen store or feature is not installed. */
export class MissingDependencyError extends OutboxError {
  constructor(
    readonly packageName: string,
    readonly feature: string,
  ) {
    super(
      `${feature} needs the optional package "${packageName}", which is not installed. ` +
        `Install it with: npm install ${packageName}`,
    );
  }
}
