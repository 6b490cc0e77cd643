import { type DomainError, notFoundMessage } from "../../domain/errors.ts"
import type { SqlError } from "../../store/Sql.ts"

/** A refusal as MQTT states it: the MQTT 5 reason code (§2.4) and a message for the log. */
export interface MqttRefusal {
  readonly reasonCode: number
  readonly message: string
}

/**
 * Domain error → MQTT 5 PUBACK/SUBACK reason code: the one table for MQTT. aedes 1.x speaks
 * MQTT 3.1 and 3.1.1 only, where a refused PUBLISH can only be acknowledged or the
 * connection closed [MQTT-3.3.5-2]; the code is logged with each refusal and is what a
 * version 5 session would receive.
 */
export const mqttRefusal = (e: DomainError | SqlError): MqttRefusal => {
  switch (e._tag) {
    case "InvalidInput":
      return { reasonCode: e.field === "topic" ? 0x90 : 0x99, message: e.message }
    case "Unauthorized":
      return { reasonCode: 0x87, message: e.message }
    case "Forbidden":
      return { reasonCode: 0x87, message: e.message }
    // Another organisation's device is "not found" over REST; here the topic is not authorised.
    case "NotFound":
      return { reasonCode: 0x87, message: notFoundMessage(e) }
    case "Conflict":
      return { reasonCode: 0x83, message: e.message }
    case "PayloadTooLarge":
      return { reasonCode: 0x95, message: `payload: larger than ${e.limit} bytes` }
    case "UnsupportedMediaType":
      return { reasonCode: 0x99, message: `payload: ${e.contentType} is not JSON` }
    case "RateLimited":
      return { reasonCode: 0x96, message: e.message }
    case "Unavailable":
      return { reasonCode: 0x97, message: e.message }
    case "SqlError":
      return { reasonCode: 0x80, message: `store failed: ${e.message}` }
  }
}

/** CONNACK return codes of MQTT 3.1.1 §3.2.2.3 that authentication can answer. */
export const CONNACK_IDENTIFIER_REJECTED = 2
export const CONNACK_SERVER_UNAVAILABLE = 3
export const CONNACK_BAD_USERNAME_OR_PASSWORD = 4
