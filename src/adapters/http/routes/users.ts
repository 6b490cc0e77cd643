import { z } from "@hono/zod-openapi"
import { Effect } from "effect"
import { Auth } from "../../../auth/Auth.ts"
import { NotFound } from "../../../domain/errors.ts"
import { type SpaceJson, spaceQuery } from "../../../store/spaces.ts"
import { presentSpaces, reseedSpaces, spacesOfRecipient } from "../../../entities/spaceReads.ts"
import { getOne } from "../../../store/crud.ts"
import {
  addOrganisationUser,
  addSpaceAlertUser,
  addTeamMember,
  createTeam,
  deleteTeam,
  getOrganisationUser,
  getTeam,
  listOrganisationUsers,
  listTeams,
  removeOrganisationUser,
  removeSpaceAlertUser,
  removeTeamMember,
  setAdmin,
  userOrder
} from "../../../store/directory.ts"
import { Sql } from "../../../store/Sql.ts"
import { intParam, listParams, sortParam } from "../params.ts"
import { type Api, listReply } from "../route.ts"
import { spaceSchema } from "../schemas.ts"
import { devicesChanged } from "./resources.ts"

const teamRef = z.object({ id: z.string(), name: z.string(), isAdmin: z.boolean() })
const organisationUserSchema = z.object({
  id: z.string(),
  userId: z.string(),
  firstName: z.string(),
  lastName: z.string(),
  fullName: z.string(),
  emailAddress: z.string(),
  isAdmin: z.boolean(),
  loginViaSsoOnly: z.boolean(),
  teams: z.array(teamRef),
  createdAt: z.number().int(),
  updatedAt: z.number().int()
}).openapi("OrganisationUser")

const memberSchema = z.object({
  id: z.string(),
  userId: z.string(),
  name: z.string(),
  fullName: z.string(),
  emailAddress: z.string(),
  isAdmin: z.boolean()
})
const teamSchema = z.object({
  id: z.string(),
  name: z.string(),
  isAdmin: z.boolean(),
  organisationId: z.string(),
  members: z.array(memberSchema),
  createdAt: z.number().int(),
  updatedAt: z.number().int()
}).openapi("Team")

  .openapi("ManagementClient")

const bool = z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")])
const ouParams = z.object({ organisationUserId: z.string().min(1).max(200) })
const teamParams = z.object({ id: z.string().min(1).max(200) })
const teamMemberParams = z.object({ id: z.string().min(1).max(200), organisationUserId: z.string().min(1).max(200) })
const spaceUserParams = z.object({ id: z.string().min(1).max(200), organisationUserId: z.string().min(1).max(200) })
/** A space as `GET /spaces/{id}` answers it, with live counts, once its entity has read the recipients just changed. */
const presentSpace = (space: SpaceJson) =>
  Effect.andThen(reseedSpaces([space.id]), presentSpaces([space])).pipe(Effect.map((items) => items[0]))
const memberBody = z.object({ organisationUserId: z.string().min(1).max(200) })

const forget = Auth.use((auth) => auth.forget())

/** The user-management interface: organisation users, teams, space alert recipients (management clients: `management.ts`). */
export const userRoutes = (api: Api): void => {
  api.route({
    method: "post",
    path: "/organisations/users/",
    aliases: ["/organisations/users"],
    tag: "User management",
    summary: "Create a user and add it to the organisation",
    description: "An address already registered elsewhere is added as it is, with its own name and password: given a password, " +
      "it is 409 (the password would not be used); one already in this organisation is 409.",
    access: "manage",
    body: z.object({
      emailAddress: z.email({ message: "must be an e-mail address" }).max(320),
      fullName: z.string().min(1).max(200),
      password: z.string().min(8, { message: "must be at least 8 characters" }).max(1000).optional(),
      loginViaSsoOnly: bool.optional(),
      isAdmin: bool.optional()
    }),
    response: organisationUserSchema,
    handle: function*({ principal, body }) {
      const sql = yield* Sql
      const id = yield* sql.transaction((tx) =>
        addOrganisationUser(tx, principal.organisationId, {
          emailAddress: body.emailAddress,
          fullName: body.fullName,
          password: body.password,
          loginViaSsoOnly: body.loginViaSsoOnly ?? false,
          isAdmin: body.isAdmin ?? false
        })
      )
      return yield* getOrganisationUser(sql, principal.organisationId, id)
    }
  })

  api.route({
    method: "get",
    path: "/organisations/users",
    aliases: ["/organisations/users/"],
    tag: "User management",
    summary: "List the organisation's users",
    access: "manage",
    query: z.object({
      limit: intParam(1, 200, 20),
      page: intParam(0, 1_000_000, 0),
      sort: sortParam,
      order: listParams(Object.keys(userOrder), "createdAt").order
    }),
    response: z.array(organisationUserSchema),
    handler: ({ principal, query }) =>
      Sql.use((sql) => listOrganisationUsers(sql, principal.organisationId, query)).pipe(Effect.map((page) => listReply(page)))
  })

  api.route({
    method: "get",
    path: "/organisations/:organisationUserId",
    tag: "User management",
    summary: "An organisation user with their teams",
    access: "manage",
    params: ouParams,
    response: organisationUserSchema,
    handler: ({ principal, params }) => Sql.use((sql) => getOrganisationUser(sql, principal.organisationId, params.organisationUserId))
  })

  api.route({
    method: "put",
    path: "/organisations/users/:organisationUserId",
    tag: "User management",
    summary: "Make a user an admin or not (the last admin cannot be demoted)",
    access: "manage",
    params: ouParams,
    body: z.object({ isAdmin: bool }),
    response: organisationUserSchema,
    handle: function*({ principal, params, body }) {
      const sql = yield* Sql
      yield* sql.transaction((tx) => setAdmin(tx, principal.organisationId, params.organisationUserId, body.isAdmin))
      yield* forget
      return yield* getOrganisationUser(sql, principal.organisationId, params.organisationUserId)
    }
  })

  api.route({
    method: "delete",
    path: "/organisations/users/:organisationUserId",
    tag: "User management",
    summary: "Remove a user from the organisation and delete it",
    description: "Its team memberships, alert subscriptions and tokens go with it; its sessions close at once.",
    access: "manage",
    params: ouParams,
    response: z.object({ removed: z.literal(true) }),
    handle: function*({ principal, params }) {
      const sql = yield* Sql
      const spaces = yield* spacesOfRecipient(sql, params.organisationUserId)
      yield* sql.transaction((tx) => removeOrganisationUser(tx, principal.organisationId, params.organisationUserId))
      yield* forget
      // Its alert subscriptions went with it: cached pages of spaces list it no more.
      if (spaces.length > 0) yield* devicesChanged(principal.organisationId)
      yield* reseedSpaces(spaces)
      return { removed: true }
    }
  })

  api.route({
    method: "post",
    path: "/teams/",
    aliases: ["/teams"],
    tag: "User management",
    summary: "Create a team",
    access: "manage",
    body: z.object({ organisationId: z.string().min(1).max(200), name: z.string().min(1).max(200), isAdmin: bool.optional() }),
    response: teamSchema,
    handle: function*({ principal, body }) {
      if (body.organisationId !== principal.organisationId) {
        return yield* new NotFound({ resource: "organisation", id: body.organisationId })
      }
      const sql = yield* Sql
      const id = yield* createTeam(sql, principal.organisationId, { name: body.name, isAdmin: body.isAdmin ?? false })
      return yield* getTeam(sql, principal.organisationId, id)
    }
  })

  api.route({
    method: "get",
    path: "/teams/",
    aliases: ["/teams"],
    tag: "User management",
    summary: "List teams",
    access: "manage",
    query: z.object({ limit: intParam(1, 200, 20), page: intParam(0, 1_000_000, 0) }),
    response: z.array(teamSchema),
    handler: ({ principal, query }) => Sql.use((sql) => listTeams(sql, principal.organisationId, query)).pipe(Effect.map((page) => listReply(page)))
  })

  api.route({
    method: "get",
    path: "/teams/:id",
    tag: "User management",
    summary: "A team with its members",
    access: "manage",
    params: teamParams,
    response: teamSchema,
    handler: ({ principal, params }) => Sql.use((sql) => getTeam(sql, principal.organisationId, params.id))
  })

  api.route({
    method: "delete",
    path: "/teams/:id",
    tag: "User management",
    summary: "Delete a team",
    access: "manage",
    params: teamParams,
    response: z.object({ deleted: z.literal(true) }),
    handler: ({ principal, params }) =>
      Sql.use((sql) => deleteTeam(sql, principal.organisationId, params.id)).pipe(Effect.as({ id: params.id, deleted: true }))
  })

  api.route({
    method: "post",
    path: "/teams/:id/members",
    tag: "User management",
    summary: "Add a user to a team (adding twice is harmless)",
    access: "manage",
    params: teamParams,
    body: memberBody,
    response: teamSchema,
    handle: function*({ principal, params, body }) {
      const sql = yield* Sql
      yield* addTeamMember(sql, principal.organisationId, params.id, body.organisationUserId)
      return yield* getTeam(sql, principal.organisationId, params.id)
    }
  })

  api.route({
    method: "delete",
    path: "/teams/:id/members",
    tag: "User management",
    summary: "Remove a user from a team (user in the body)",
    access: "manage",
    params: teamParams,
    body: memberBody,
    response: z.object({ deleted: z.literal(true) }),
    handler: ({ principal, params, body }) =>
      Sql.use((sql) => removeTeamMember(sql, principal.organisationId, params.id, body.organisationUserId)).pipe(
        Effect.as({ deleted: true })
      )
  })

  api.route({
    method: "delete",
    path: "/teams/:id/members/:organisationUserId",
    tag: "User management",
    summary: "Remove a user from a team",
    access: "manage",
    params: teamMemberParams,
    response: z.object({ deleted: z.literal(true) }),
    handler: ({ principal, params }) =>
      Sql.use((sql) => removeTeamMember(sql, principal.organisationId, params.id, params.organisationUserId)).pipe(
        Effect.as({ deleted: true })
      )
  })

  api.route({
    method: "post",
    path: "/spaces/:id/alerts/users/:organisationUserId",
    tag: "User management",
    summary: "Add a user to the space's alert recipients",
    access: "manage",
    params: spaceUserParams,
    response: spaceSchema,
    handle: function*({ principal, params }) {
      const sql = yield* Sql
      yield* addSpaceAlertUser(sql, principal.organisationId, params.id, params.organisationUserId)
      yield* devicesChanged(principal.organisationId)
      return yield* presentSpace(yield* getOne(sql, spaceQuery, principal.organisationId, params.id))
    }
  })

  api.route({
    method: "delete",
    path: "/spaces/:id/alerts/users/:organisationUserId",
    tag: "User management",
    summary: "Remove a user from the space's alert recipients",
    access: "manage",
    params: spaceUserParams,
    response: spaceSchema,
    handle: function*({ principal, params }) {
      const sql = yield* Sql
      yield* removeSpaceAlertUser(sql, principal.organisationId, params.id, params.organisationUserId)
      yield* devicesChanged(principal.organisationId)
      return yield* presentSpace(yield* getOne(sql, spaceQuery, principal.organisationId, params.id))
    }
  })
}
