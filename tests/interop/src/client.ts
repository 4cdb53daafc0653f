/**
 * A client written with Effect RPC (effect 4.1): RpcClient over RpcClient.layerProtocolSocket
 * and RpcSerialization.layerJson, on @effect/platform-node's WebSocket, driving a bridge of
 * bridge_client (Python) with the same group definition as src/bridge.ts.
 *
 * Environment: BRIDGE_INTEROP_URL (ws://host:port/), BRIDGE_INTEROP_TOKEN (the bearer token),
 * BRIDGE_INTEROP_IDS ("number": Effect's own numeric ids, the default; "string": string ids).
 *
 * Prints one JSON line per check, {"check": name, "ok": bool, "detail": ...}, then a summary
 * line {"summary": {"passed": n, "failed": m}}, and exits 1 when a check failed.
 */
import { NodeRuntime, NodeWS } from "@effect/platform-node"
import { Cause, Effect, Exit, Layer, Schedule, Stream } from "effect"
import { RpcClient, RpcSerialization } from "effect/rpc"
import { RequestId } from "effect/rpc/RpcMessage"
import * as Socket from "effect/socket/Socket"
import { BridgeRpcs, type Part, SessionNotFound, TurnConflict, TurnNotFound } from "./group.ts"

const url = process.env.BRIDGE_INTEROP_URL ?? ""
const token = process.env.BRIDGE_INTEROP_TOKEN ?? ""
const stringIds = process.env.BRIDGE_INTEROP_IDS === "string"

let passed = 0
let failed = 0
const report = (check: string, ok: boolean, detail?: unknown) => {
  if (ok) passed++
  else failed++
  console.log(JSON.stringify({ check, ok, detail: detail === undefined ? null : String(detail).slice(0, 500) }))
}

let pingTimeouts = 0

const protocol = (bearer: string) =>
  RpcClient.layerProtocolSocket({
    pingInterval: "100 millis",
    pingTimeout: "3 seconds",
    retryPolicy: Schedule.recurs(0),
    onPingTimeout: Effect.sync(() => {
      pingTimeouts++
    })
  }).pipe(
    Layer.provide(Layer.effect(Socket.Socket)(Socket.makeWebSocket(url, {
      headers: { authorization: `Bearer ${bearer}` },
      openTimeout: "5 seconds"
    }))),
    Layer.provide(NodeWS.layerWebSocketConstructor),
    Layer.provide(RpcSerialization.layerJson)
  )

let nextId = 1
const clientOptions = stringIds ? { generateRequestId: () => RequestId(String(nextId++)) } : undefined

const readAll = (stream: Stream.Stream<Part, unknown>) => Stream.runCollect(stream).pipe(Effect.map((c) => Array.from(c)))

const program = Effect.gen(function*() {
  const client = yield* RpcClient.make(BridgeRpcs, clientOptions)

  const hello = yield* client.Hello(null)
  report("Hello", hello.protocol === 1 && hello.agentId === "echo" && hello.instance.length > 0, JSON.stringify(hello))

  const opened = yield* client.OpenSession({ sessionId: "s-effect", state: null })
  report("OpenSession", opened.sessionId === "s-effect" && opened.revision === 0, JSON.stringify(opened))

  const withEnv = yield* client.OpenSession({ sessionId: "s-effect-env", state: null, env: { FOO: "from-effect" } })
  report("OpenSession with env", withEnv.sessionId === "s-effect-env" && withEnv.revision === 0, JSON.stringify(withEnv))

  const higher = yield* client.OpenSession({ sessionId: "s-effect", state: { sessionId: "s-effect", revision: 5, data: { from: "effect" } } })
  report("OpenSession keeps the higher revision", higher.revision === 5, JSON.stringify(higher))

  const started = yield* client.StartTurn({ sessionId: "s-effect", turnId: "t-1", prompt: "hello from effect" })
  report("StartTurn", started.turnId === "t-1" && started.status === "started", JSON.stringify(started))

  const again = yield* client.StartTurn({ sessionId: "s-effect", turnId: "t-1", prompt: "hello from effect" })
  report("StartTurn again is harmless", ["running", "finished"].includes(again.status), JSON.stringify(again))

  // ReadTurn: the Effect client acks every Chunk; our bridge sends the next only after it.
  const parts = yield* readAll(client.ReadTurn({ sessionId: "s-effect", turnId: "t-1", offset: 0, afterStep: 0 }))
  const types = parts.map((p) => p.type)
  const text = parts.filter((p) => p.type === "text-delta").map((p) => p.text).join("")
  report(
    "ReadTurn with acks",
    types[0] === "turn-start" && types[types.length - 1] === "turn-finish" &&
      parts.every((p, i) => p.index === i) && text === "hello from effect".repeat(3),
    `${parts.length} parts: ${types.join(",")}`
  )

  const tail = yield* readAll(client.ReadTurn({ sessionId: "s-effect", turnId: "t-1", offset: 3, afterStep: 0 }))
  report("ReadTurn from an offset", tail.length === parts.length - 3 && tail[0].index === 3, `${tail.length} parts`)

  const skipped = yield* readAll(client.ReadTurn({ sessionId: "s-effect", turnId: "t-1", offset: 0, afterStep: 2 }))
  report(
    "ReadTurn afterStep",
    skipped.every((p) => p.step === null || (p.step as number) >= 2) && skipped.some((p) => p.step === 2),
    skipped.map((p) => `${p.type}@${p.step}`).join(",")
  )

  // StartTurn and ReadTurn sent together (as our host does): our bridge answers a new turn's
  // StartTurn and that read's first Chunk in one batch frame, StartTurn's Exit first.
  const [pairStart, pairRead] = yield* Effect.all([
    client.StartTurn({ sessionId: "s-effect", turnId: "t-pair", prompt: "a pair" }),
    Effect.exit(readAll(client.ReadTurn({ sessionId: "s-effect", turnId: "t-pair", offset: 0, afterStep: 0 }))),
  ], { concurrency: "unbounded" })
  const pairParts = Exit.isSuccess(pairRead) ? pairRead.value : []
  report(
    "StartTurn and ReadTurn together",
    pairStart.status === "started" && pairParts[0]?.type === "turn-start" && pairParts[pairParts.length - 1]?.type === "turn-finish"
      && pairParts.filter((p) => p.type === "text-delta").map((p) => (p as { text: string }).text).join("")
        === "a pair".repeat(pairParts.filter((p) => p.type === "step-start").length),
    JSON.stringify({ status: pairStart.status, parts: pairParts.length, read: pairRead._tag })
  )

  // A slow turn: interrupt a read after 3 parts (the Effect client sends Interrupt), then
  // cancel the turn; a new read sees it end with turn-finish "cancelled".
  const words = Array.from({ length: 300 }, (_, i) => `w${i}`).join(" ")
  yield* client.StartTurn({ sessionId: "s-effect", turnId: "t-slow", prompt: words })
  const firstThree = yield* Stream.runCollect(
    Stream.take(client.ReadTurn({ sessionId: "s-effect", turnId: "t-slow", offset: 0, afterStep: 0 }), 3)
  )
  report("Interrupt of a read", firstThree.length === 3, `${firstThree.length} parts before the interrupt`)

  const cancelled = yield* client.CancelTurn({ sessionId: "s-effect", turnId: "t-slow" })
  report("CancelTurn", cancelled.turnId === "t-slow", JSON.stringify(cancelled))
  const rest = yield* readAll(client.ReadTurn({ sessionId: "s-effect", turnId: "t-slow", offset: 0, afterStep: 0 }))
  const last = rest[rest.length - 1]
  report("cancelled turn ends with turn-finish", last?.type === "turn-finish" && last.finishReason === "cancelled", JSON.stringify(last))

  // Typed failures decode into the group's error classes.
  const noSession = yield* Effect.flip(client.StartTurn({ sessionId: "s-none", turnId: "t-x", prompt: "x" }))
  report("typed failure SessionNotFound", noSession instanceof SessionNotFound && noSession.sessionId === "s-none", JSON.stringify(noSession))
  const conflict = yield* Effect.flip(client.StartTurn({ sessionId: "s-effect", turnId: "t-1", prompt: "other" }))
  report("typed failure TurnConflict", conflict instanceof TurnConflict, JSON.stringify(conflict))
  const noTurn = yield* Effect.flip(readAll(client.ReadTurn({ sessionId: "s-effect", turnId: "t-none", offset: 0, afterStep: 0 })))
  report("typed failure TurnNotFound (stream)", noTurn instanceof TurnNotFound, JSON.stringify(noTurn))
  const noCancel = yield* Effect.flip(client.CancelTurn({ sessionId: "s-effect", turnId: "t-none" }))
  report("typed failure TurnNotFound", noCancel instanceof TurnNotFound, JSON.stringify(noCancel))

  // Pings: this client pings every 100 ms and drops the connection after 3 s without a frame.
  yield* Effect.sleep("1500 millis")
  const stillHello = yield* client.Hello(null)
  report("Ping/Pong keeps the connection", pingTimeouts === 0 && stillHello.instance === hello.instance, `ping timeouts: ${pingTimeouts}`)

  const closed = yield* client.CloseSession({ sessionId: "s-effect" })
  report("CloseSession", closed.sessionId === "s-effect" && closed.revision >= 6, JSON.stringify(closed))
  const closeUnknown = yield* Effect.flip(client.CloseSession({ sessionId: "s-none" }))
  report("typed failure SessionNotFound (CloseSession)", closeUnknown instanceof SessionNotFound, JSON.stringify(closeUnknown))
}).pipe(Effect.scoped, Effect.provide(protocol(token)))

// C17: with a wrong token the upgrade is refused (401) before any RPC.
const refused = Effect.gen(function*() {
  const client = yield* RpcClient.make(BridgeRpcs)
  return yield* client.Hello(null)
}).pipe(Effect.scoped, Effect.provide(protocol("wrong-token")), Effect.timeout("10 seconds"), Effect.exit)

// The chain of causes of an error, as text (the socket's own error says "401").
const describe = (error: unknown): string => {
  const seen: Array<string> = []
  let current: any = error
  for (let i = 0; current && i < 6; i++) {
    seen.push(String(current?.message ?? current))
    current = current?.reason ?? current?.cause
  }
  return seen.join(" <- ")
}

NodeRuntime.runMain(Effect.gen(function*() {
  const exit = yield* Effect.exit(program)
  if (Exit.isFailure(exit)) report("program", false, Cause.pretty(exit.cause))
  const wrong = yield* refused
  const why = Exit.isFailure(wrong) ? describe(Cause.squash(wrong.cause)) : "succeeded"
  report("401 with a wrong token", Exit.isFailure(wrong) && /401/.test(why), why)
  console.log(JSON.stringify({ summary: { passed, failed } }))
  if (failed > 0) process.exitCode = 1
}), { disableErrorReporting: true })
