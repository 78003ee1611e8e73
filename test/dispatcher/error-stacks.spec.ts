import { stackHead } from '../../lib/dispatcher/run-outcomes';
import { OutboxOptionsError } from '../../lib/errors/outbox-options.error';
import { resolveOutboxOptions } from '../../lib/outbox-options';

const resolve = (errorStacks: unknown) =>
  resolveOutboxOptions({ store: { type: 'memory' }, errorStacks } as never).errorStacks;

describe('errorStacks option', () => {
  it('defaults to the first 10 lines, at most 2048 characters; false turns it off', () => {
    expect(resolve(undefined)).toEqual({ lines: 10, maxLength: 2048 });
    expect(resolve(true)).toEqual({ lines: 10, maxLength: 2048 });
    expect(resolve(false)).toBeNull();
    expect(resolve({ lines: 3 })).toEqual({ lines: 3, maxLength: 2048 });
  });

  it.each([
    [{ lines: 0 }, 'errorStacks.lines'],
    [{ lines: 201 }, 'errorStacks.lines'],
    [{ maxLength: 16_385 }, 'errorStacks.maxLength'],
    [{ depth: 2 }, 'errorStacks'],
    ['yes', 'errorStacks'],
  ])('refuses %j naming %s', (value, field) => {
    expect(() => resolve(value)).toThrow(OutboxOptionsError);
    expect(() => resolve(value)).toThrow(field);
  });
});

describe('stackHead', () => {
  const error = new Error('boom');
  error.stack = [
    'Error: boom',
    ...Array.from({ length: 30 }, (_, i) => `    at f${i} (x.ts:${i}:1)`),
  ].join('\n');

  it('keeps the first lines, bounded in characters', () => {
    expect(stackHead(error, { lines: 3, maxLength: 2048 })).toBe(
      'Error: boom\n    at f0 (x.ts:0:1)\n    at f1 (x.ts:1:1)',
    );
    expect(stackHead(error, { lines: 3, maxLength: 15 })).toBe('Error: boom\n   ');
    expect(stackHead(error, undefined)!.split('\n')).toHaveLength(10);
  });

  it('keeps none when off, for a non-Error, or without a stack', () => {
    expect(stackHead(error, null)).toBeUndefined();
    expect(stackHead('boom', { lines: 3, maxLength: 100 })).toBeUndefined();
    const bare = new Error('x');
    bare.stack = undefined;
    expect(stackHead(bare, { lines: 3, maxLength: 100 })).toBeUndefined();
  });
});
