/** Who is calling, as established by `Auth.authenticate`. Handlers see this, never a token. */
export type Principal = AppKeyPrincipal | DevicePrincipal | UserPrincipal | ManagementPrincipal

export interface AppKeyPrincipal {
  readonly kind: "app"
  readonly id: string
  readonly organisationId: string
  readonly readOnly: boolean
  /** A key of the platform organisation (the first one) may create organisations. */
  readonly platform: boolean
}

export interface DevicePrincipal {
  readonly kind: "device"
  readonly id: string
  readonly organisationId: string
}

export interface UserPrincipal {
  readonly kind: "user"
  readonly id: string
  readonly tokenId: string
  readonly organisationId: string
  readonly organisationUserId: string
  readonly emailAddress: string
  readonly isAdmin: boolean
  readonly platform: boolean
  readonly scope: string
}

/** A bearer from `POST /oauth/token` (client credentials): the user-management interface only. */
export interface ManagementPrincipal {
  readonly kind: "management"
  /** The management client's id. */
  readonly id: string
  readonly organisationId: string
}

/**
 * What a route needs:
 * - `read`: any application key or user token of the organisation;
 * - `write`: a writable application key or any user token;
 * - `admin`: a writable application key or an admin's user token (keys, users, teams);
 * - `manage`: the user-management interface — an admin's user token, a writable application key
 *   or a management token;
 * - `directory`: `read`, or a management token (the user-management `GET /spaces`);
 * - `platform`: the platform administrator (creates organisations);
 * - `any`: any valid credential, devices included (`/whoami`).
 */
export type Access = "read" | "write" | "admin" | "manage" | "directory" | "platform" | "any" | "device"

export const allows = (principal: Principal, access: Access): boolean => {
  switch (access) {
    case "any":
      return true
    case "device":
      return principal.kind === "device"
    case "read":
      return principal.kind === "app" || principal.kind === "user"
    case "directory":
      return principal.kind !== "device"
    case "manage":
      return principal.kind === "management" || allows(principal, "admin")
    case "write":
      return principal.kind === "user" || (principal.kind === "app" && !principal.readOnly)
    case "admin":
      return (principal.kind === "user" && principal.isAdmin) || (principal.kind === "app" && !principal.readOnly)
    case "platform":
      return (principal.kind === "user" && principal.platform) ||
        (principal.kind === "app" && principal.platform && !principal.readOnly)
  }
}
