import { MissingDependencyError } from './errors/missing-dependency.error';

/**
 * Throws one `MissingDependencyError` naming every package of `packageNames` that cannot be
 * resolved, so a feature needing several optional peers is fixed by one install, not one restart
 * per package.
 */
export function assertInstalled(feature: string, packageNames: readonly string[]): void {
  const missing = packageNames.filter((name) => {
    try {
      require.resolve(name);
      return false;
    } catch {
      return true;
    }
  });
  if (missing.length > 0) throw new MissingDependencyError(missing, feature);
}
