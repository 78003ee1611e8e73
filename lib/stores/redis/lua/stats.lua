local oldest = redis.call('ZRANGE', PEND, 0, 0, 'WITHSCORES')[2] or ''
return { now, redis.call('ZCARD', PEND), redis.call('ZCOUNT', PEND, '-inf', now), oldest,
  redis.call('HGET', CNT, 'l') or '0', redis.call('ZCARD', DEAD), redis.call('HGETALL', CNT) }
