import { randomUUID } from 'node:crypto';
import { IdempotencyClaim, IdempotencyStore } from './idempotency-store.interface';

export interface MemoryIdempotencyStoreOptions {
  /** Clock for TTLs, injectable for tests. @default () => new Date() */
  clock?: () => Date;
}

interface Entry {
  /** `done`, or the token of the in-progress claim. */
  value: string;
  expiresAt: number;
}

const DONE = 'done';

/** In-process twin of `RedisIdempotencyStore`, for tests and single-process apps. */
export class MemoryIdempotencyStore implements IdempotencyStore {
  private readonly entries = new Map<string, Entry>();
  private readonly clock: () => Date;

  constructor(options: MemoryIdempotencyStoreOptions = {}) {
    this.clock = options.clock ?? (() => new Date());
  }

  private live(id: string): Entry | undefined {
    const entry = this.entries.get(id);
    if (entry && entry.expiresAt <= this.clock().getTime()) {
      this.entries.delete(id);
      return undefined;
    }
    return entry;
  }

  async claim(scope: string, key: string, processingTtlMs: number): Promise<IdempotencyClaim> {
    const id = entryId(scope, key);
    const entry = this.live(id);
    if (entry) return entry.value === DONE ? { status: 'done' } : { status: 'in-progress' };
    const token = randomUUID();
    this.entries.set(id, { value: token, expiresAt: this.clock().getTime() + processingTtlMs });
    return { status: 'acquired', token };
  }

  async markDone(scope: string, key: string, doneTtlMs: number): Promise<void> {
    this.entries.set(entryId(scope, key), {
      value: DONE,
      expiresAt: this.clock().getTime() + doneTtlMs,
    });
  }

  async release(scope: string, key: string, token?: string): Promise<boolean> {
    const id = entryId(scope, key);
    const entry = this.live(id);
    if (!entry || entry.value === DONE || (token !== undefined && entry.value !== token))
      return false;
    this.entries.delete(id);
    return true;
  }

  async isDone(scope: string, key: string): Promise<boolean> {
    return this.live(entryId(scope, key))?.value === DONE;
  }

  /** Drops expired entries; the store does it lazily on access otherwise. */
  sweep(): void {
    for (const id of [...this.entries.keys()]) this.live(id);
  }
}

function entryId(scope: string, key: string): string {
  return JSON.stringify([scope, key]);
}
