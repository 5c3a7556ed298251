-- The view flusher's counts for the ranking: many items' views in one call
-- (a command per item per flush was most of what a web server sent Redis once
-- cached pages came from its own memory), applied at most once: a call whose
-- answer was lost is sent again with its number, and whichever copy runs second
-- changes nothing.
-- KEYS[1] viewed: (scores are minus the view count)
-- KEYS[2] the last call number applied for this writer (a process)
-- KEYS[3] unranked: (items retired lately: their views held in a batch when
-- they were retired are not counted, or they would come back into viewed:)
-- ARGV[1] this call's number; ARGV[2] seconds the number is remembered;
-- then item id, views, item id, views, ...
local number = tonumber(ARGV[1])
if number <= tonumber(redis.call('GET', KEYS[2]) or '0') then
  return 0
end
for i = 3, #ARGV, 2 do
  if not redis.call('ZSCORE', KEYS[3], ARGV[i]) then
    redis.call('ZINCRBY', KEYS[1], -tonumber(ARGV[i + 1]), ARGV[i])
  end
end
redis.call('SET', KEYS[2], number, 'EX', ARGV[2])
return (#ARGV - 2) / 2
