/**
 * C18 over Effect RPC: an Effect 4.1 RpcClient (the group of src/group.ts) drives a bridge of
 * bridge_client whose agent asks before it runs a command and takes messages (the shell
 * driver): OpenSession with approvals on, the approval-request part, AnswerApproval (sent
 * twice, then a conflicting decision, then an unknown id), SendMessage (twice with one id),
 * the user-message part and the message's own request, a denial, and what a finished turn
 * answers.
 *
 * Environment: BRIDGE_INTEROP_URL, BRIDGE_INTEROP_TOKEN. Prints one JSON line per check, then
 * a summary line, and exits 1 when a check failed (as src/client.ts).
 */
import { NodeRuntime, NodeWS } from "@effect/platform-node"
import { Cause, Effect, Exit, Layer, Schedule, Stream } from "effect"
import { RpcClient, RpcSerialization } from "effect/rpc"
import * as Socket from "effect/socket/Socket"
import { ApprovalConflict, ApprovalNotFound, BridgeRpcs, type Part, TurnNotRunning } from "./group.ts"

const url = process.env.BRIDGE_INTEROP_URL ?? ""
const token = process.env.BRIDGE_INTEROP_TOKEN ?? ""

let passed = 0
let failed = 0
const report = (check: string, ok: boolean, detail?: unknown) => {
  if (ok) passed++
  else failed++
  console.log(JSON.stringify({ check, ok, detail: detail === undefined ? null : String(detail).slice(0, 500) }))
}

const protocol = RpcClient.layerProtocolSocket({ retryPolicy: Schedule.recurs(0) }).pipe(
  Layer.provide(Layer.effect(Socket.Socket)(Socket.makeWebSocket(url, {
    headers: { authorization: `Bearer ${token}` },
    openTimeout: "5 seconds"
  }))),
  Layer.provide(NodeWS.layerWebSocketConstructor),
  Layer.provide(RpcSerialization.layerJson)
)

const program = Effect.gen(function*() {
  const client = yield* RpcClient.make(BridgeRpcs)
  const sessionId = "s-effect-interactive"
  const turnId = "t-ask"
  const all: Array<Part> = []
  // Read from where the last read stopped up to (and with) the first part `until` accepts.
  const readUntil = (until: (p: Part) => boolean) =>
    Stream.runCollect(
      Stream.takeUntil(
        client.ReadTurn({ sessionId, turnId, offset: all.length === 0 ? 0 : (all[all.length - 1].index as number) + 1, afterStep: 0 }),
        until
      )
    ).pipe(Effect.map((c) => {
      all.push(...c)
      return Array.from(c)
    }))

  const opened = yield* client.OpenSession({ sessionId, state: null, interactive: { approvals: true, approvalTimeout: null } })
  report("OpenSession with approvals on", opened.sessionId === sessionId, JSON.stringify(opened))

  yield* client.StartTurn({ sessionId, turnId, prompt: "echo from-effect" })
  const first = yield* readUntil((p) => p.type === "approval-request")
  const request = first[first.length - 1]
  report(
    "approval-request part",
    request?.type === "approval-request" && request.toolName === "shell" &&
      (request.input as any)?.command === "echo from-effect" && Array.isArray(request.choices),
    JSON.stringify(request)
  )
  const requestId = String(request?.requestId)

  const sent = yield* client.SendMessage({ sessionId, turnId, messageId: "m1", text: "echo steered" })
  const sentAgain = yield* client.SendMessage({ sessionId, turnId, messageId: "m1", text: "echo steered" })
  report("SendMessage is idempotent by message id", sent.messageId === "m1" && sentAgain.index === sent.index, JSON.stringify([sent, sentAgain]))

  const answered = yield* client.AnswerApproval({ sessionId, turnId, requestId, decision: "allow-once", message: null })
  const answeredAgain = yield* client.AnswerApproval({ sessionId, turnId, requestId, decision: "allow-once" })
  report(
    "AnswerApproval, twice",
    answered.requestId === requestId && answered.decision === "allow-once" && answered.by === "host" &&
      JSON.stringify(answeredAgain) === JSON.stringify(answered),
    JSON.stringify([answered, answeredAgain])
  )
  const conflict = yield* Effect.flip(client.AnswerApproval({ sessionId, turnId, requestId, decision: "deny" }))
  report(
    "typed failure ApprovalConflict names the first answer",
    conflict instanceof ApprovalConflict && conflict.recorded.decision === "allow-once",
    JSON.stringify(conflict)
  )
  const unknown = yield* Effect.flip(client.AnswerApproval({ sessionId, turnId, requestId: "0.1.9-00000000", decision: "deny" }))
  report("typed failure ApprovalNotFound", unknown instanceof ApprovalNotFound, JSON.stringify(unknown))

  const second = yield* readUntil((p) => p.type === "approval-request")
  const asked = second[second.length - 1]
  const message = all.find((p) => p.type === "user-message")
  report(
    "user-message part and the message's own request",
    message?.messageId === "m1" && message?.step === null && (asked?.input as any)?.command === "echo steered",
    JSON.stringify([message, asked])
  )
  const denied = yield* client.AnswerApproval({ sessionId, turnId, requestId: String(asked?.requestId), decision: "deny", message: "not from effect" })
  report("AnswerApproval deny", denied.decision === "deny" && denied.message === "not from effect", JSON.stringify(denied))

  yield* readUntil((p) => p.type === "turn-finish")
  const text = all.filter((p) => p.type === "text-delta").map((p) => p.text).join("")
  const answers = all.filter((p) => p.type === "approval-answer").map((p) => `${p.decision}/${p.by}`)
  const last = all[all.length - 1]
  report(
    "the turn ran the allowed command only",
    last?.type === "turn-finish" && last.finishReason === "stop" && text.includes("from-effect") &&
      !text.includes("steered") && answers.join(",") === "allow-once/host,deny/host",
    `${answers.join(",")} text=${JSON.stringify(text)}`
  )

  const late = yield* Effect.flip(client.SendMessage({ sessionId, turnId, messageId: "m2", text: "echo late" }))
  report("typed failure TurnNotRunning", late instanceof TurnNotRunning, JSON.stringify(late))
}).pipe(Effect.scoped, Effect.provide(protocol))

NodeRuntime.runMain(Effect.gen(function*() {
  const exit = yield* Effect.exit(program.pipe(Effect.timeout("40 seconds")))
  if (Exit.isFailure(exit)) report("program", false, Cause.pretty(exit.cause))
  console.log(JSON.stringify({ summary: { passed, failed } }))
  if (failed > 0) process.exitCode = 1
}), { disableErrorReporting: true })
