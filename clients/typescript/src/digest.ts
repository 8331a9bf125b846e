/**
 * The digest of a tool call's arguments, as agentd computes it (docs/protocol.md, "Arguments digest"): the
 * lowercase hex SHA-256 of their RFC 8785 canonical JSON (JCS) in UTF-8. A person approves the arguments
 * they were shown; sending their digest with the decision (resolve's argsDigest) makes agentd refuse
 * arguments that are not those.
 */
import { createHash } from "node:crypto";
import type { Json } from "./types.js";

/** value's RFC 8785 canonical JSON text: no whitespace, members sorted by their names' UTF-16 code units
 * (JavaScript's default string order), strings and numbers as JSON.stringify writes them. */
export function canonicalJson(value: Json): string {
  if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError(`${value} has no JSON form`);
    return JSON.stringify(value); // ECMAScript's Number::toString, -0 as 0
  }
  if (Array.isArray(value)) return "[" + value.map(canonicalJson).join(",") + "]";
  if (typeof value === "object") {
    const keys = Object.keys(value).sort();
    return "{" + keys.map((k) => JSON.stringify(k) + ":" + canonicalJson(value[k] as Json)).join(",") + "}";
  }
  throw new TypeError(`${typeof value} has no JSON form`);
}

/** The digest agentd shows as a tool call's args_digest and resolve's args_digest takes. */
export function argsDigest(args: Json): string {
  return createHash("sha256").update(canonicalJson(args), "utf8").digest("hex");
}
