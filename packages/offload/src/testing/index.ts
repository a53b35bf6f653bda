// `@kvasir/offload/testing`: helpers for tests and benchmarks that need a real Redis.
export {
  type RedisClusterHandle,
  type RedisServerHandle,
  type StartRedisServerOptions,
  startRedisCluster,
  startRedisServer,
} from './redis-server.js';
