-- first_undo: takes back a first touch's state (see first.go) whose time
-- turned out misdated (Redis's clock stepped): the key had no state
-- before the SET NX, so while it still holds exactly the bytes written,
-- deleting it undoes the first touch. Not joined after the prelude: it
-- reads no clock.
--
-- KEYS[1]  the key the first touch set
-- ARGV     the bytes it wrote
-- returns  1 if the key was deleted, 0 if another call changed it since
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
