// `@kvasir/offload/testing`: helpers for tests and benchmarks that need a real Redis.
export {
  type RedisServerHandle,
  type StartRedisServerOptions,
  startRedisServer,
} from './redis-server';
