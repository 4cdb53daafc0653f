/**
 * C22 over Effect RPC: an Effect 4.1 RpcClient (the group of src/group.ts) drives a bridge of
 * bridge_client whose agent calls a host tool (the openai driver against a scripted model,
 * tests/host_tools/host_tools_mock.py): OpenSession with hostTools, the host-tool-call part,
 * ClaimHostTool (twice by one host, then by another once answered), AnswerHostTool (twice:
 * the recorded result comes back), an unknown call id, and the tool result in the turn.
 *
 * Environment: BRIDGE_INTEROP_URL, BRIDGE_INTEROP_TOKEN. Prints one JSON line per check, then
 * a summary line, and exits 1 when a check failed (as src/client.ts).
 */
import { NodeRuntime, NodeWS } from "@effect/platform-node"
import { Cause, Effect, Exit, Layer, Schedule, Stream } from "effect"
import { RpcClient, RpcSerialization } from "effect/rpc"
import * as Socket from "effect/socket/Socket"
import { BridgeRpcs, HostToolCallNotFound, type Part } from "./group.ts"

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

const lookup = {
  name: "lookup",
  description: "Look a key up.",
  inputSchema: { type: "object", properties: { key: { type: "string" } }, required: ["key"] }
}

const program = Effect.gen(function*() {
  const client = yield* RpcClient.make(BridgeRpcs)
  const sessionId = "s-effect-host-tools"
  const turnId = "t-tool"
  const all: Array<Part> = []
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

  const opened = yield* client.OpenSession({
    sessionId, state: null, interactive: { approvals: false, hostTools: [lookup], toolTimeout: 30 }
  })
  report("OpenSession with hostTools", opened.sessionId === sessionId, JSON.stringify(opened))

  yield* client.StartTurn({ sessionId, turnId, prompt: "look alpha up" })
  const first = yield* readUntil((p) => p.type === "host-tool-call")
  const call = first[first.length - 1]
  const callId = String(call?.callId)
  report(
    "host-tool-call part",
    call?.type === "host-tool-call" && call.toolName === "lookup" && (call.input as any)?.key === "alpha",
    JSON.stringify(call)
  )

  const claimed = yield* client.ClaimHostTool({ sessionId, turnId, callId, hostId: "effect-host", retry: false })
  const again = yield* client.ClaimHostTool({ sessionId, turnId, callId, hostId: "effect-host", retry: false })
  report("ClaimHostTool, twice by one host", claimed.status === "run" && again.status === "run", JSON.stringify([claimed, again]))

  const answered = yield* client.AnswerHostTool({ sessionId, turnId, callId, output: { value: 42 }, isError: false })
  const answeredAgain = yield* client.AnswerHostTool({ sessionId, turnId, callId, output: { value: 0 }, isError: false })
  report(
    "AnswerHostTool, twice: the first result stands",
    answered.status === "recorded" && answered.by === "host" && (answeredAgain.output as any)?.value === 42,
    JSON.stringify([answered, answeredAgain])
  )

  const other = yield* client.ClaimHostTool({ sessionId, turnId, callId, hostId: "another-host", retry: true })
  report("a claim after the result runs nothing", other.status !== "run", JSON.stringify(other))

  const unknown = yield* Effect.flip(client.AnswerHostTool({ sessionId, turnId, callId: "9.9.9-00000000", output: null }))
  report("typed failure HostToolCallNotFound", unknown instanceof HostToolCallNotFound, JSON.stringify(unknown))

  yield* readUntil((p) => p.type === "turn-finish")
  const results = all.filter((p) => p.type === "host-tool-result")
  const toolResult = all.find((p) => p.type === "tool-result")
  const last = all[all.length - 1]
  report(
    "the agent got the recorded result once",
    results.length === 1 && (results[0].output as any)?.value === 42 && (toolResult?.output as any)?.value === 42 &&
      last?.type === "turn-finish" && last.finishReason === "stop",
    JSON.stringify([results, toolResult, last])
  )
}).pipe(Effect.scoped, Effect.provide(protocol))

NodeRuntime.runMain(Effect.gen(function*() {
  const exit = yield* Effect.exit(program.pipe(Effect.timeout("40 seconds")))
  if (Exit.isFailure(exit)) report("program", false, Cause.pretty(exit.cause))
  console.log(JSON.stringify({ summary: { passed, failed } }))
  if (failed > 0) process.exitCode = 1
}), { disableErrorReporting: true })
