/** The parts of a TypeORM `QueryRunner` the hold below wraps. */
interface RunnerLike {
  commitTransaction(): Promise<void>;
  rollbackTransaction(): Promise<void>;
}

const held = new WeakMap<RunnerLike, Promise<unknown>[]>();

/**
 * Makes the TypeORM transaction behind `tx` (an EntityManager of a transaction) wait for `append`
 * before it ends: `AggregateRoot.commit()` returns nothing to await, so without this the
 * transaction could commit (or roll back and run the INSERT on its own) before the append reached
 * the connection. A failed append fails the commit, which rolls the transaction back. Returns false
 * when `tx` is not such a manager (the caller must then await the publish itself).
 */
export function holdTransactionFor(tx: unknown, append: Promise<unknown>): boolean {
  const runner = (tx as { queryRunner?: Partial<RunnerLike> } | null)?.queryRunner;
  if (
    !runner ||
    typeof runner.commitTransaction !== 'function' ||
    typeof runner.rollbackTransaction !== 'function'
  ) {
    return false;
  }
  const target = runner as RunnerLike;
  const pending = held.get(target);
  if (pending) {
    pending.push(append);
    return true;
  }
  held.set(target, [append]);
  const commit = target.commitTransaction;
  const rollback = target.rollbackTransaction;
  const owned =
    Object.hasOwn(target, 'commitTransaction') || Object.hasOwn(target, 'rollbackTransaction');
  const release = () => {
    const list = held.get(target) ?? [];
    held.delete(target);
    if (owned) {
      target.commitTransaction = commit;
      target.rollbackTransaction = rollback;
    } else {
      // Own properties shadowed the prototype's methods; deleting them restores TypeORM's own.
      delete (target as Partial<RunnerLike>).commitTransaction;
      delete (target as Partial<RunnerLike>).rollbackTransaction;
    }
    return list;
  };
  target.commitTransaction = async function (this: RunnerLike, ...args: []) {
    await Promise.all(release());
    return commit.apply(this, args);
  };
  target.rollbackTransaction = async function (this: RunnerLike, ...args: []) {
    await Promise.allSettled(release());
    return rollback.apply(this, args);
  };
  return true;
}
