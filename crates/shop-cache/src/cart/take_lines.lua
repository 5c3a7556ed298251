-- What the scripts that take an order's lines out of a cart start with
-- (scripts.rs puts this before them): cart_take.lua and cart_take_order.lua.
-- Removes from the cart hash `cart` each line ARGV[from], ARGV[from + 1], ...
-- names (item id, quantity ordered, in pairs) whose quantity is still the one
-- ordered: a line added or changed since stays as the shopper left it.
-- Returns how many lines it removed.
local function take_lines(cart, from)
  local removed = 0
  for i = from, #ARGV, 2 do
    if redis.call('HGET', cart, ARGV[i]) == ARGV[i + 1] then
      redis.call('HDEL', cart, ARGV[i])
      removed = removed + 1
    end
  end
  return removed
end
