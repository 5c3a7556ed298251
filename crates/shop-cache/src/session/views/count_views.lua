-- The view flusher's counts for the ranking: many items' views in one call
-- (a command per item per flush was most of what a web server sent Redis once
-- cached pages came from its own memory).
-- KEYS[1] viewed: (scores are minus the view count)
-- ARGV: item id, views, item id, views, ...
for i = 1, #ARGV, 2 do
  redis.call('ZINCRBY', KEYS[1], -tonumber(ARGV[i + 1]), ARGV[i])
end
return #ARGV / 2
