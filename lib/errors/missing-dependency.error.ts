import { OutboxError } from './outbox.error';

/**
 * Optional peer dependencies needed by the chosen store or feature are not installed. All of the
 * feature's missing packages are named at once, so one install fixes it.
 */
export class MissingDependencyError extends OutboxError {
  /** Every missing package, in the order the feature lists them. */
  readonly packageNames: readonly string[];
  /** The first missing package. */
  readonly packageName: string;

  constructor(
    packageNames: string | readonly string[],
    readonly feature: string,
  ) {
    const names = typeof packageNames === 'string' ? [packageNames] : [...packageNames];
    const quoted = names.map((n) => `"${n}"`);
    const list =
      quoted.length === 1 ? quoted[0] : `${quoted.slice(0, -1).join(', ')} and ${quoted.at(-1)}`;
    super(
      names.length === 1
        ? `${feature} needs the optional package ${list}, which is not installed. ` +
            `Install it with: npm install ${names[0]}`
        : `${feature} needs the optional packages ${list}, which are not installed. ` +
            `Install them with: npm install ${names.join(' ')}`,
    );
    this.packageNames = names;
    this.packageName = names[0];
  }
}
