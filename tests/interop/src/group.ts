/**
 * The bridge's RPC catalogue (PROTOCOL.md, "Catalogue", protocol 1) as an Effect RpcGroup.
 *
 * Shared by the TypeScript bridge (bridge.ts) and the TypeScript client (client.ts), so both
 * sides of the interop tests speak exactly what an Effect user would write.
 */
import { Schema } from "effect"
import { Rpc, RpcGroup } from "effect/rpc"

// Typed errors: {"_tag": NAME, "message": str} plus fields (PROTOCOL.md, "Catalogue").
export class BadRequest extends Schema.TaggedError<BadRequest>()("BadRequest", {
  message: Schema.String
}) {}

export class SessionNotFound extends Schema.TaggedError<SessionNotFound>()("SessionNotFound", {
  message: Schema.String,
  sessionId: Schema.optional(Schema.String)
}) {}

export class TurnNotFound extends Schema.TaggedError<TurnNotFound>()("TurnNotFound", {
  message: Schema.String,
  turnId: Schema.optional(Schema.String)
}) {}

export class TurnConflict extends Schema.TaggedError<TurnConflict>()("TurnConflict", {
  message: Schema.String,
  turnId: Schema.optional(Schema.String)
}) {}

// B09: the bridge is at a bound of its work (streams, running turns); retryable.
export class Overloaded extends Schema.TaggedError<Overloaded>()("Overloaded", {
  message: Schema.String,
  turnId: Schema.optional(Schema.String)
}) {}

// B03: a session state whose revision is too close to 2**53-1 to grow.
export class RevisionExhausted extends Schema.TaggedError<RevisionExhausted>()("RevisionExhausted", {
  message: Schema.String,
  sessionId: Schema.optional(Schema.String),
  revision: Schema.optional(Schema.Number)
}) {}

// C18: interactive turns (approvals, user messages).
export const RecordedAnswer = Schema.Struct({
  requestId: Schema.String,
  decision: Schema.Literals(["allow-once", "allow-always", "deny"]),
  message: Schema.NullOr(Schema.String),
  by: Schema.Literals(["host", "policy", "timeout", "cancel"])
})

export class ApprovalNotFound extends Schema.TaggedError<ApprovalNotFound>()("ApprovalNotFound", {
  message: Schema.String,
  turnId: Schema.optional(Schema.String),
  requestId: Schema.optional(Schema.String)
}) {}

export class ApprovalExpired extends Schema.TaggedError<ApprovalExpired>()("ApprovalExpired", {
  message: Schema.String,
  turnId: Schema.optional(Schema.String),
  requestId: Schema.optional(Schema.String),
  recorded: Schema.optional(Schema.NullOr(RecordedAnswer))
}) {}

export class ApprovalConflict extends Schema.TaggedError<ApprovalConflict>()("ApprovalConflict", {
  message: Schema.String,
  turnId: Schema.optional(Schema.String),
  requestId: Schema.optional(Schema.String),
  recorded: RecordedAnswer
}) {}

export class ApprovalsUnsupported extends Schema.TaggedError<ApprovalsUnsupported>()("ApprovalsUnsupported", {
  message: Schema.String,
  sessionId: Schema.optional(Schema.String)
}) {}

export class MessagesUnsupported extends Schema.TaggedError<MessagesUnsupported>()("MessagesUnsupported", {
  message: Schema.String,
  turnId: Schema.optional(Schema.String)
}) {}

export class TurnNotRunning extends Schema.TaggedError<TurnNotRunning>()("TurnNotRunning", {
  message: Schema.String,
  turnId: Schema.optional(Schema.String)
}) {}

export const SessionState = Schema.Struct({
  sessionId: Schema.String,
  revision: Schema.Number,
  data: Schema.Unknown
})
export type SessionState = typeof SessionState.Type

export const Hello = Schema.Struct({
  agentId: Schema.String,
  bridgeId: Schema.String,
  instance: Schema.String,
  protocol: Schema.Number,
  pid: Schema.Number,
  startedAt: Schema.String,
  // B10: the store generation; bridges from before it (and the TypeScript one) leave it out.
  generation: Schema.optional(Schema.String)
})

export const TurnStatus = Schema.Struct({
  turnId: Schema.String,
  status: Schema.Literals(["started", "running", "continued", "finished"])
})

// A part keeps every field it carries (a Struct would drop the type-specific ones).
export const Part = Schema.Record(Schema.String, Schema.Unknown)
export type Part = typeof Part.Type

// BadRequest is listed for every RPC that takes a payload: our bridge answers any payload of
// the wrong shape with it (PROTOCOL.md's catalogue leaves it out for CancelTurn and
// CloseSession; see docs/protocol.md, "Decisions").
// C22: host tools (their specs in OpenSession, the calls' typed failures and results).
export const HostToolSpec = Schema.Struct({
  name: Schema.String,
  description: Schema.String,
  inputSchema: Schema.Record(Schema.String, Schema.Unknown),
  approve: Schema.optional(Schema.Boolean),
  retryOnHostLoss: Schema.optional(Schema.Boolean)
})

export const HostToolDecider = Schema.Literals(["host", "timeout", "host-lost", "cancel"])

export const HostToolRecorded = Schema.Struct({
  callId: Schema.String,
  toolName: Schema.String,
  output: Schema.Unknown,
  isError: Schema.Boolean,
  by: HostToolDecider
})

export class ToolsUnsupported extends Schema.TaggedError<ToolsUnsupported>()("ToolsUnsupported", {
  message: Schema.String,
  sessionId: Schema.optional(Schema.String)
}) {}

export class HostToolCallNotFound extends Schema.TaggedError<HostToolCallNotFound>()("HostToolCallNotFound", {
  message: Schema.String,
  turnId: Schema.optional(Schema.String),
  callId: Schema.optional(Schema.String)
}) {}

export const BridgeRpcs = RpcGroup.make(
  Rpc.make("Hello", { payload: Schema.Null, success: Hello }),
  Rpc.make("OpenSession", {
    // env: the session's environment (names to values), sent on every new connection.
    payload: {
      sessionId: Schema.String,
      state: Schema.NullOr(SessionState),
      env: Schema.optional(Schema.NullOr(Schema.Record(Schema.String, Schema.String))),
      // C18: approvals on or off (absent: off), and how long a request waits (seconds).
      interactive: Schema.optional(Schema.NullOr(Schema.Struct({
        approvals: Schema.optional(Schema.Boolean),
        approvalTimeout: Schema.optional(Schema.NullOr(Schema.Number)),
        // C22: the session's host tools, and how long a call waits for a host (seconds).
        hostTools: Schema.optional(Schema.Array(HostToolSpec)),
        toolTimeout: Schema.optional(Schema.NullOr(Schema.Number))
      })))
    },
    success: SessionState,
    error: Schema.Union([BadRequest, RevisionExhausted, ApprovalsUnsupported, ToolsUnsupported])
  }),
  Rpc.make("StartTurn", {
    payload: { sessionId: Schema.String, turnId: Schema.String, prompt: Schema.String },
    success: TurnStatus,
    error: Schema.Union([SessionNotFound, TurnConflict, Overloaded, BadRequest])
  }),
  Rpc.make("ReadTurn", {
    payload: {
      sessionId: Schema.String,
      turnId: Schema.String,
      offset: Schema.Number,
      afterStep: Schema.Number
    },
    success: Part,
    error: Schema.Union([SessionNotFound, TurnNotFound, Overloaded, BadRequest]),
    stream: true
  }),
  Rpc.make("CancelTurn", {
    payload: { sessionId: Schema.String, turnId: Schema.String },
    success: TurnStatus,
    error: Schema.Union([TurnNotFound, BadRequest])
  }),
  Rpc.make("CloseSession", {
    payload: { sessionId: Schema.String },
    success: SessionState,
    error: Schema.Union([SessionNotFound, BadRequest])
  }),
  Rpc.make("AnswerApproval", {
    payload: {
      sessionId: Schema.String,
      turnId: Schema.String,
      requestId: Schema.String,
      decision: Schema.Literals(["allow-once", "allow-always", "deny"]),
      message: Schema.optional(Schema.NullOr(Schema.String)),
      by: Schema.optional(Schema.Literals(["host", "policy"]))
    },
    success: RecordedAnswer,
    error: Schema.Union([TurnNotFound, ApprovalNotFound, ApprovalExpired, ApprovalConflict, BadRequest])
  }),
  Rpc.make("SendMessage", {
    payload: { sessionId: Schema.String, turnId: Schema.String, messageId: Schema.String, text: Schema.String },
    success: Schema.Struct({ messageId: Schema.String, index: Schema.Number }),
    error: Schema.Union([TurnNotFound, TurnNotRunning, MessagesUnsupported, BadRequest])
  }),
  // C22: a host claims a host tool call before it runs the function, then sends its result.
  Rpc.make("ClaimHostTool", {
    payload: {
      sessionId: Schema.String,
      turnId: Schema.String,
      callId: Schema.String,
      hostId: Schema.String,
      retry: Schema.optional(Schema.Boolean)
    },
    success: Schema.Struct({
      callId: Schema.String,
      status: Schema.Literals(["run", "running", "answered", "expired"]),
      lease: Schema.optional(Schema.Number),
      result: Schema.optional(HostToolRecorded)
    }),
    error: Schema.Union([TurnNotFound, HostToolCallNotFound, BadRequest])
  }),
  Rpc.make("AnswerHostTool", {
    payload: {
      sessionId: Schema.String,
      turnId: Schema.String,
      callId: Schema.String,
      output: Schema.Unknown,
      isError: Schema.optional(Schema.Boolean)
    },
    success: Schema.Struct({
      callId: Schema.String,
      status: Schema.Literals(["recorded", "expired"]),
      toolName: Schema.optional(Schema.String),
      output: Schema.optional(Schema.Unknown),
      isError: Schema.optional(Schema.Boolean),
      by: Schema.optional(HostToolDecider)
    }),
    error: Schema.Union([TurnNotFound, HostToolCallNotFound, BadRequest])
  })
)
