/**
 * agentd-client: a client of agentd's control socket (JSON lines over a Unix socket,
 * docs/protocol.md), with no runtime dependency beyond Node's own modules.
 */
export { Client, DEFAULT_SOCKET, IDEMPOTENT, newEventId, socketPath } from "./client.js";
export type {
  ClientOptions, CreateOptions, DecisionOptions, EventsOptions, ExtendOptions, ForkOptions, ListOptions, OnBusy,
  ResolveOptions, ScheduleOptions,
  SendOptions, UpdateOptions,
} from "./client.js";
export { argsDigest, canonicalJson } from "./digest.js";
export { Watch } from "./watch.js";
export type { WatchItem, WatchOptions } from "./watch.js";
export * from "./errors.js";
export type * from "./types.js";
