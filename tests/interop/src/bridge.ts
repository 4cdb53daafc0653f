/**
 * A bridge written with Effect RPC (effect 4.1): RpcServer.layerProtocolWebsocket over
 * RpcSerialization.layerJson on @effect/platform-node, serving PROTOCOL.md's catalogue from
 * memory with an echo-like agent. The interop tests launch it as a host would launch any
 * bridge program (BridgeOptions.command/args): it reads launch.json and token from the state
 * directory named by BRIDGE_CLIENT_STATE_DIR and writes listening.json once it listens.
 *
 * The agent: a prompt's words come back as text-delta parts, one step per line. A prompt that
 * starts with "slow" emits one word every 50 ms for up to 400 words (to be cancelled). A
 * prompt "ask WORDS" in a session opened with approvals on asks first (C18): an
 * approval-request for the tool "echo", then, once AnswerApproval came, the approval-answer and
 * the words (allowed) or nothing (denied). SendMessage records a user-message part in any
 * running turn. The bearer token is checked before the upgrade (401); /healthz answers without it.
 */
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import { createServer } from "node:http"
import * as path from "node:path"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { Effect, Layer, Stream } from "effect"
import { HttpRouter, HttpServer, HttpServerRequest, HttpServerResponse } from "effect/http"
import { RpcSerialization, RpcServer } from "effect/rpc"
import {
  ApprovalConflict,
  ApprovalExpired,
  ApprovalNotFound,
  BadRequest,
  BridgeRpcs,
  HostToolCallNotFound,
  type Part,
  SessionNotFound,
  type SessionState,
  TurnConflict,
  TurnNotFound,
  TurnNotRunning
} from "./group.ts"

const PROTOCOL = 1
const stateDir = process.env.BRIDGE_CLIENT_STATE_DIR
if (!stateDir) {
  console.error("BRIDGE_CLIENT_STATE_DIR is not set")
  process.exit(2)
}
const launch = JSON.parse(fs.readFileSync(path.join(stateDir, "launch.json"), "utf8"))
const token = fs.readFileSync(path.join(stateDir, "token"), "utf8").trim()
const agentId: string = launch.agentId
const bridgeId: string = launch.bridgeId
const bind: string = launch.bind ?? "127.0.0.1"
const instance = randomUUID().replace(/-/g, "")
const startedAt = new Date().toISOString()

// B06, roughly: exit after launch.json's idleTimeout seconds without a request and with no
// turn running, so a bridge left behind by an interrupted test run ends by itself.
const idleMillis = Number(launch.idleTimeout ?? 600) * 1000
let lastActivity = Date.now()
const touch = () => {
  lastActivity = Date.now()
}
setInterval(() => {
  const running = Array.from(turns.values()).some((t) => !t.finished)
  if (!running && Date.now() - lastActivity > idleMillis) {
    fs.rmSync(path.join(stateDir, "listening.json"), { force: true })
    process.exit(0)
  }
}, 1000).unref()

// ----------------------------------------------------------------------------- the agent

interface Turn {
  readonly sessionId: string
  readonly id: string
  readonly prompt: string
  readonly parts: Array<Part>
  finished: boolean
  cancelled: boolean
  wake: Array<() => void>
  // C18: approval requests by id (the answer once recorded) and user messages by id.
  requests: Map<string, { step: number; answer: Answer | null; resume: (a: Answer) => void }>
  messages: Map<string, { text: string; index: number }>
}

type Answer = { requestId: string; decision: "allow-once" | "allow-always" | "deny"; message: string | null; by: "host" | "policy" | "timeout" | "cancel" }

const sessions = new Map<string, { state: SessionState; open: boolean; approvals: boolean }>()
const turns = new Map<string, Turn>()

const push = (turn: Turn, part: Omit<Part, "index">) => {
  turn.parts.push({ ...part, index: turn.parts.length })
  if (part.type === "turn-finish") turn.finished = true
  const waiting = turn.wake
  turn.wake = []
  for (const f of waiting) f()
}

const runTurn = (turn: Turn) => {
  const slow = turn.prompt.startsWith("slow")
  const lines = turn.prompt.split("\n")
  const words = slow ? Array.from({ length: 400 }, (_, i) => `w${i} `) : []
  let step = 0
  const finish = (reason: string) => {
    const session = sessions.get(turn.sessionId)!
    session.state = {
      ...session.state,
      revision: session.state.revision + 1,
      data: { turns: ((session.state.data as any)?.turns ?? 0) + 1 }
    }
    push(turn, { type: "session-state", step: null, attempt: 1, state: session.state })
    push(turn, { type: "turn-finish", step: null, attempt: 1, finishReason: reason, usage: null, error: null })
  }
  if (turn.prompt.startsWith("ask ") && sessions.get(turn.sessionId)!.approvals) {
    const words = turn.prompt.slice(4)
    const requestId = "0.1.1-effect"
    push(turn, { type: "step-start", step: 0, attempt: 1 })
    push(turn, { type: "tool-call", step: 0, attempt: 1, toolCallId: "call-0", toolName: "echo", input: { text: words } })
    turn.requests.set(requestId, {
      step: 0,
      answer: null,
      resume: (answer) => {
        push(turn, { type: "approval-answer", step: 0, attempt: 1, ...answer })
        if (answer.decision !== "deny") push(turn, { type: "text-delta", step: 0, attempt: 1, text: words })
        push(turn, { type: "tool-result", step: 0, attempt: 1, toolCallId: "call-0", toolName: "echo", output: { denied: answer.decision === "deny" }, isError: answer.decision === "deny" })
        push(turn, { type: "step-finish", step: 0, attempt: 1, finishReason: "stop", usage: null })
        finish("stop")
      }
    })
    push(turn, {
      type: "approval-request",
      step: 0,
      attempt: 1,
      requestId,
      toolCallId: "call-0",
      toolName: "echo",
      input: { text: words },
      choices: ["allow-once", "deny"],
      title: `echo: ${words}`
    })
    return
  }
  if (slow) {
    push(turn, { type: "step-start", step: 0, attempt: 1 })
    let i = 0
    const tick = () => {
      if (turn.cancelled) return finish("cancelled")
      if (i >= words.length) {
        push(turn, { type: "step-finish", step: 0, attempt: 1, finishReason: "stop", usage: null })
        return finish("stop")
      }
      push(turn, { type: "text-delta", step: 0, attempt: 1, text: words[i++] })
      setTimeout(tick, 50)
    }
    setTimeout(tick, 50)
    return
  }
  for (const line of lines) {
    push(turn, { type: "step-start", step, attempt: 1 })
    for (const word of line.split(/(?<= )/)) {
      if (word) push(turn, { type: "text-delta", step, attempt: 1, text: word })
    }
    push(turn, { type: "step-finish", step, attempt: 1, finishReason: "stop", usage: { outputTokens: 1 } })
    step++
  }
  finish("stop")
}

async function* partsFrom(turn: Turn, offset: number, afterStep: number): AsyncGenerator<[Part, ...Array<Part>]> {
  let position = offset
  while (true) {
    if (position >= turn.parts.length) {
      if (turn.finished) return
      await new Promise<void>((resolve) => turn.wake.push(resolve))
      continue
    }
    const batch = turn.parts.slice(position).filter((p) => p.step === null || (p.step as number) >= afterStep)
    position = turn.parts.length
    if (batch.length > 0) yield batch as [Part, ...Array<Part>]
  }
}

const findSession = (sessionId: string) => {
  const session = sessions.get(sessionId)
  return session && session.open
    ? Effect.succeed(session)
    : Effect.fail(new SessionNotFound({ message: `no session ${JSON.stringify(sessionId)}`, sessionId }))
}

const findTurn = (sessionId: string, turnId: string) => {
  const turn = turns.get(turnId)
  return turn && turn.sessionId === sessionId
    ? Effect.succeed(turn)
    : Effect.fail(new TurnNotFound({ message: `no turn ${JSON.stringify(turnId)}`, turnId }))
}

const Handlers = BridgeRpcs.toLayer({
  Hello: () => Effect.sync(touch).pipe(Effect.as({ agentId, bridgeId, instance, protocol: PROTOCOL, pid: process.pid, startedAt })),
  OpenSession: ({ interactive, sessionId, state }) => {
    touch()
    if (state !== null && state.sessionId !== sessionId) {
      return Effect.fail(new BadRequest({ message: "state.sessionId differs from sessionId" }))
    }
    const mine = sessions.get(sessionId)?.state
    const best = [mine, state ?? undefined].filter((s): s is SessionState => s !== undefined)
      .sort((a, b) => b.revision - a.revision)[0] ?? { sessionId, revision: 0, data: null }
    sessions.set(sessionId, { state: best, open: true, approvals: interactive?.approvals === true })
    return Effect.succeed(best)
  },
  StartTurn: ({ prompt, sessionId, turnId }) =>
    Effect.gen(function*() {
      touch()
      yield* findSession(sessionId)
      const existing = turns.get(turnId)
      if (existing) {
        if (existing.prompt !== prompt || existing.sessionId !== sessionId) {
          return yield* new TurnConflict({ message: `turn ${JSON.stringify(turnId)} has another prompt`, turnId })
        }
        return { turnId, status: existing.finished ? "finished" as const : "running" as const }
      }
      const turn: Turn = {
        sessionId, id: turnId, prompt, parts: [], finished: false, cancelled: false, wake: [],
        requests: new Map(), messages: new Map()
      }
      turns.set(turnId, turn)
      push(turn, {
        type: "turn-start",
        step: null,
        attempt: 1,
        turn: { protocol: PROTOCOL, agentId, bridgeId, sessionId, turnId, prompt, startedAt: new Date().toISOString() }
      })
      runTurn(turn)
      return { turnId, status: "started" as const }
    }),
  ReadTurn: ({ afterStep, offset, sessionId, turnId }) =>
    Stream.unwrap(Effect.sync(touch).pipe(Effect.andThen(Effect.map(
      findSession(sessionId).pipe(Effect.andThen(findTurn(sessionId, turnId))),
      (turn) =>
        Stream.fromAsyncIterable(partsFrom(turn, offset, afterStep), (e) => new BadRequest({ message: String(e) }))
          .pipe(Stream.flattenArray)
    )))),
  CancelTurn: ({ sessionId, turnId }) =>
    Effect.sync(touch).pipe(Effect.andThen(Effect.map(findTurn(sessionId, turnId), (turn) => {
      if (!turn.finished) turn.cancelled = true
      return { turnId, status: turn.finished ? "finished" as const : "running" as const }
    }))),
  CloseSession: ({ sessionId }) =>
    Effect.map(findSession(sessionId), (session) => {
      touch()
      session.open = false
      return session.state
    }),
  AnswerApproval: ({ decision, message, requestId, sessionId, turnId }) =>
    Effect.gen(function*() {
      touch()
      const turn = yield* findTurn(sessionId, turnId)
      const request = turn.requests.get(requestId)
      if (!request) {
        return yield* new ApprovalNotFound({ message: `no approval request ${JSON.stringify(requestId)}`, turnId, requestId })
      }
      if (request.answer) {
        if (request.answer.decision !== decision) {
          return yield* new ApprovalConflict({ message: `answered ${request.answer.decision} before`, turnId, requestId, recorded: request.answer })
        }
        return request.answer
      }
      if (turn.finished) {
        return yield* new ApprovalExpired({ message: "the turn finished", turnId, requestId, recorded: null })
      }
      const answer: Answer = { requestId, decision, message: message ?? null, by: "host" }
      request.answer = answer
      request.resume(answer)
      return answer
    }),
  SendMessage: ({ messageId, sessionId, text, turnId }) =>
    Effect.gen(function*() {
      touch()
      const turn = yield* findTurn(sessionId, turnId)
      const known = turn.messages.get(messageId)
      if (known) {
        if (known.text !== text) return yield* new BadRequest({ message: `message ${messageId} had another text` })
        return { messageId, index: known.index }
      }
      if (turn.finished) return yield* new TurnNotRunning({ message: "the turn finished", turnId })
      const index = turn.parts.length
      turn.messages.set(messageId, { text, index })
      push(turn, { type: "user-message", step: null, attempt: 1, messageId, text })
      return { messageId, index }
    }),
  // C22: this bridge's agent calls no host tools, so no call id is known.
  ClaimHostTool: ({ callId, sessionId, turnId }) =>
    Effect.gen(function*() {
      touch()
      yield* findTurn(sessionId, turnId)
      return yield* new HostToolCallNotFound({ message: `no host tool call ${JSON.stringify(callId)}`, turnId, callId })
    }),
  AnswerHostTool: ({ callId, sessionId, turnId }) =>
    Effect.gen(function*() {
      touch()
      yield* findTurn(sessionId, turnId)
      return yield* new HostToolCallNotFound({ message: `no host tool call ${JSON.stringify(callId)}`, turnId, callId })
    })
})

// ----------------------------------------------------------------------------- the server

// C17: the bearer token before the upgrade, compared in constant time; /healthz needs none.
const Auth = HttpRouter.middleware((httpEffect) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (request.url.split("?")[0] === "/healthz") return yield* httpEffect
    const given = Buffer.from(String(request.headers["authorization"] ?? ""))
    const wanted = Buffer.from(`Bearer ${token}`)
    const crypto = yield* Effect.promise(() => import("node:crypto"))
    if (given.length !== wanted.length || !crypto.timingSafeEqual(given, wanted)) {
      return HttpServerResponse.text("missing or wrong bearer token\n", {
        status: 401,
        headers: { "www-authenticate": "Bearer" }
      })
    }
    return yield* httpEffect
  }), { global: true })

const Health = HttpRouter.add("GET", "/healthz", HttpServerResponse.json({ protocol: PROTOCOL }))

const Rpc = RpcServer.layer(BridgeRpcs, { disableFatalDefects: true }).pipe(
  Layer.provide(Handlers),
  Layer.provide(RpcServer.layerProtocolWebsocket({ path: "/" })),
  Layer.provide(RpcSerialization.layerJson)
)

// B01: write listening.json atomically (temporary file, rename, mode 0600) once listening.
const Listening = Layer.effectDiscard(Effect.gen(function*() {
  const server = yield* HttpServer.HttpServer
  const address = server.address
  if (!("port" in address)) return yield* Effect.die("not listening on TCP")
  const file = path.join(stateDir, "listening.json")
  const tmp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(tmp, JSON.stringify({
    protocol: PROTOCOL,
    agentId,
    bridgeId,
    host: bind,
    port: address.port,
    pid: process.pid,
    instance,
    startedAt
  }), { mode: 0o600 })
  fs.renameSync(tmp, file)
  yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(file, { force: true })))
}))

const Main = Layer.mergeAll(
  HttpRouter.serve(Layer.mergeAll(Rpc, Health, Auth), { disableLogger: true, disableListenLog: true }),
  Listening
).pipe(Layer.provide(NodeHttpServer.layer(createServer, { port: 0, host: bind })))

NodeRuntime.runMain(Layer.launch(Main))
