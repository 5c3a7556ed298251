-- Helpers for scripts that handle a whole batch with one command of each kind (a
-- command a row cost Redis about as much again), prepended to those scripts
-- (scripts.rs). Lua's unpack holds a few thousand values, so each command is
-- sent in chunks of at most BATCH_CHUNK entries.
local BATCH_CHUNK = 1000

-- Runs `cmd` [key] over `args`, whose entries are `width` values each (a member,
-- or a score and a member, ...), BATCH_CHUNK entries a call.
local function batched(cmd, key, args, width)
  local step = BATCH_CHUNK * width
  for i = 1, #args, step do
    if key then
      redis.call(cmd, key, unpack(args, i, math.min(i + step - 1, #args)))
    else
      redis.call(cmd, unpack(args, i, math.min(i + step - 1, #args)))
    end
  end
end

-- ZMSCORE of every member of `members` in `key`: their scores, false where absent.
local function batched_zmscore(key, members)
  local scores = {}
  for i = 1, #members, BATCH_CHUNK do
    local part = redis.call('ZMSCORE', key,
      unpack(members, i, math.min(i + BATCH_CHUNK - 1, #members)))
    for j = 1, #part do
      scores[i + j - 1] = part[j]
    end
  end
  return scores
end

