#!/usr/bin/env python3
"""A `fencecheck torture --worker-cmd` worker on redis-py's `Lock` (docs/campaign.md).

It reads its job from the FENCECHECK_* variables and prints what it observes on stdout, one
trace line each: CLOCK_MONOTONIC microseconds, a space, the words (`granted 7 300000`,
`write-sent 7`, `accepted 7`, ...).

As redis-py's documentation uses a lock, it takes `Lock`, reads the counter, adds one and writes
it, with nothing to stop a holder whose lease ran out while it was paused: the campaign catches
the increments it loses. With `--fence` the grant also yields a fencing token (taken in Redis only
while the lock is still this worker's) and the write carries it: PostgreSQL refuses a token below
the one stored, and the campaign passes.
"""
import os
import sys
import time

import psycopg2
import redis

env = os.environ
fenced = "--fence" in sys.argv[1:]
name, table = env["FENCECHECK_NAME"], env["FENCECHECK_TABLE"]
ttl_ms = int(env["FENCECHECK_TTL_MS"])
think = int(env["FENCECHECK_THINK_MS"]) / 1000


def say(words):
    print(time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000, words, flush=True)


r = redis.Redis.from_url(env["FENCECHECK_LOCK"])
# The next token, only while the lock (KEYS[1]) still holds this worker's lock token (ARGV[1]).
next_token = r.register_script(
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('incr', KEYS[2]) end "
    "return false"
)
db = psycopg2.connect(env["FENCECHECK_PG"])


def increment_unfenced(cur, t):
    cur.execute(f"SELECT value FROM {table} WHERE key = %s", (name,))
    row = cur.fetchone()
    v = int(bytes(row[0]) or b"0") if row else 0
    say(f"read {v}")
    time.sleep(think)
    say(f"write-sent {t}")
    cur.execute(
        f"INSERT INTO {table} (key, token, value) VALUES (%s, %s, %s) ON CONFLICT (key) "
        "DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value",
        (name, t, str(v + 1).encode()),
    )
    db.commit()
    say(f"accepted {t}")


def increment_fenced(cur, t):
    say(f"write-sent {t}")
    # The fence: the row takes this token only if the stored one is not newer, and stays locked
    # until the commit.
    cur.execute(
        f"INSERT INTO {table} AS s (key, token, value) VALUES (%s, %s, '') ON CONFLICT (key) "
        "DO UPDATE SET token = EXCLUDED.token WHERE s.token <= EXCLUDED.token RETURNING value",
        (name, t),
    )
    row = cur.fetchone()
    if row is None:
        cur.execute(f"SELECT token FROM {table} WHERE key = %s", (name,))
        highest = cur.fetchone()[0]
        db.rollback()
        say(f"rejected {t} {highest}")
        return
    v = int(bytes(row[0]) or b"0")
    say(f"read {v}")
    time.sleep(think)
    cur.execute(f"UPDATE {table} SET value = %s WHERE key = %s", (str(v + 1).encode(), name))
    db.commit()
    say(f"accepted {t}")


for _ in range(int(env["FENCECHECK_INCREMENTS"])):
    lock = r.lock(name, timeout=ttl_ms / 1000, blocking_timeout=60)
    say("acquire-sent")
    if not lock.acquire():
        say("busy")
        continue
    t = next_token(keys=[name, name + ":token"], args=[lock.local.token])
    if t is None:
        continue  # the lease ran out before the token was taken: no grant to speak of
    say(f"granted {t} {ttl_ms * 1000}")
    time.sleep(think)
    say(f"work-started {t}")
    with db.cursor() as cur:
        (increment_fenced if fenced else increment_unfenced)(cur, t)
    say(f"work-stopped {t}")
    say(f"release-sent {t}")
    try:
        lock.release()
        say(f"released {t} true")
    except redis.exceptions.LockNotOwnedError:
        say(f"released {t} false")
say("done")
