import { Schema } from "effect"

/** 400: the request is well-formed HTTP but a field or parameter breaks a rule. */
export class InvalidInput extends Schema.TaggedError<InvalidInput>()("InvalidInput", {
  field: Schema.String,
  message: Schema.String
}) {}

/** 401: no credential, or one that is unknown, expired or revoked. */
export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", {
  message: Schema.String
}) {}

/** 403: a valid credential without the right for this action. */
export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", {
  message: Schema.String
}) {}

/** 404: unknown id, or an id of another organisation (never reveal that it exists). */
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", {
  resource: Schema.String,
  id: Schema.String
}) {}

/** 409: the request conflicts with stored state (duplicate slug, customId, e-mail…). */
export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", {
  message: Schema.String
}) {}

/** 413 */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", {
  limit: Schema.Number
}) {}

/** 415 */
export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", {
  contentType: Schema.String
}) {}

/** 429 */
export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", {
  retryAfterSeconds: Schema.Number,
  message: Schema.String
}) {}

/** 503: the store or bus is behind or unreachable; try again later. */
export class Unavailable extends Schema.TaggedError<Unavailable>()("Unavailable", {
  retryAfterSeconds: Schema.Number,
  message: Schema.String
}) {}

export type DomainError =
  | InvalidInput
  | Unauthorized
  | Forbidden
  | NotFound
  | Conflict
  | PayloadTooLarge
  | UnsupportedMediaType
  | RateLimited
  | Unavailable

export const notFoundMessage = (e: NotFound): string => `${e.resource} ${e.id} not found`
