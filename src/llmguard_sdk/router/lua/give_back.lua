-- A call's lease on a deployment ends. KEYS[1] the deployment's sorted set, ARGV[1] call id.
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
