/** The resources as the REST interface answers them (the fields the console reads). */

export interface Ref {
  readonly id: string
}

export interface Space {
  readonly id: string
  readonly name: string
  readonly timezone?: string
  readonly country?: string | null
  readonly live?: { readonly devicesOnline: number; readonly devicesOffline: number; readonly openAlerts: number }
  readonly alertUsers?: ReadonlyArray<{ readonly id: string; readonly fullName: string; readonly emailAddress: string }>
}

export type LiveState = "unknown" | "online" | "offline" | "unwatched"

export interface Device {
  readonly id: string
  readonly name: string
  readonly customId: string | null
  readonly space: { readonly id: string; readonly name: string } | null
  readonly product: { readonly id: string; readonly name: string } | null
  readonly place: Ref | null
  readonly lastSeenAt: number | null
  readonly live?: { readonly isOnline: boolean; readonly state: LiveState; readonly lastSeenAt: number | null }
  readonly secretKey?: string
}

export interface DeviceEvent {
  readonly id: string
  readonly name: string
  readonly data: unknown
  readonly timestamp: number
}

export interface DeviceLocation {
  readonly id: string
  readonly latitude: string
  readonly longitude: string
  readonly altitude: string | null
  readonly timestamp: number
}

export interface Command {
  readonly id: string
  readonly name: string
  readonly slug: string
}

export interface Alert {
  readonly id: string
  readonly state: "unresolved" | "acknowledged" | "resolved"
  readonly note: string
  readonly event: { readonly name: string; readonly data: unknown } | null
  readonly device: { readonly id: string; readonly name: string; readonly space: Ref | null } | null
  readonly alertRule: { readonly id: string; readonly name: string; readonly type: string; readonly severity: string }
  readonly firstSeenAt: number
  readonly lastSeenAt: number
  readonly acknowledgedAt: number | null
  readonly resolvedAt: number | null
}

export interface AlertRule {
  readonly id: string
  readonly name: string
  readonly type: "offline" | "threshold" | "anomaly"
  readonly severity: "low" | "medium" | "high" | "critical"
  readonly enabled: boolean
  readonly autoResolve: boolean
  readonly config: Record<string, unknown>
  readonly space: Ref | null
  readonly product: Ref | null
  readonly notificationTemplate: Ref | null
}

export interface NotificationTemplate {
  readonly id: string
  readonly title: string
  readonly type: string
  readonly body: string
  readonly webhookUrl: string | null
}

export interface OrganisationUser {
  readonly id: string
  readonly fullName: string
  readonly emailAddress: string
  readonly isAdmin: boolean
  readonly teams: ReadonlyArray<{ readonly id: string; readonly name: string }>
}

export interface Team {
  readonly id: string
  readonly name: string
  readonly members: ReadonlyArray<{ readonly id: string; readonly fullName?: string; readonly emailAddress?: string }>
}
