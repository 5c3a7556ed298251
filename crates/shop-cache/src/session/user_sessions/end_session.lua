-- Ends one session (its login, last-seen entries, login time, history and
-- cart), as logout does, and when a user is given only if it is still that
-- user's session: the user's index of sessions (user-sessions:) may list a
-- token that has since ended, and a token is never ended on another's behalf.
-- Starts with end_token.lua (end_token, server_now).
-- KEYS[1] recent:  KEYS[2] login:  KEYS[3] guests:  KEYS[4] logins:
-- KEYS[5] anonymous:  KEYS[6] ended: (all the token's shard)
-- KEYS[7] viewed:<token>  KEYS[8] cart:<token>
-- ARGV[1] token  ARGV[2] user id, or '' for whoever it is (logout)
-- ARGV[3] seconds ended: keeps an entry  ARGV[4] the most entries ended: keeps
-- Returns {1 when it ended the session (0 when the token was not that user's),
-- the user it was logged in as or false}.
local was = redis.call('HGET', KEYS[2], ARGV[1])
if ARGV[2] ~= '' and was ~= ARGV[2] then
  return {0, was}
end
local shard = {
  recent = KEYS[1], login = KEYS[2], guests = KEYS[3], logins = KEYS[4],
  anonymous = KEYS[5], ended = KEYS[6],
}
end_token(shard, ARGV[1], server_now(), tonumber(ARGV[3]), tonumber(ARGV[4]))
redis.call('DEL', KEYS[7], KEYS[8])
return {1, was}
