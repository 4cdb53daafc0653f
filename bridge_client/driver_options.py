"""The checks of the built-in drivers' options (``agent_options``), in one place that both
sides import: each driver's ``make_driver`` in the bridge, and
:func:`bridge_client.agent.bridge_options` on the host, which so reports a bad driver name or
bad options at once instead of as a bridge that exits 2 at the first turn.

Pure Python, no I/O, no import of the bridge or of the drivers (the host never imports
them). A ``MODULE:CALLABLE`` driver is not checked here: it runs in the sandbox, where the
host may not be able to import it.
Every check raises ``ValueError`` naming the driver and the option.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Sequence

__all__ = [
    "BUILTIN_DRIVER_NAMES",
    "CANNOT_ASK",
    "approvals_refused",
    "check_agent_options",
    "options_object",
    "str_option",
    "str_list_option",
    "number_option",
    "bool_option",
]


def options_object(options: Any, driver: str, allowed: Sequence[str]) -> Dict[str, Any]:
    """Check a driver's ``agent_options``: ``None`` or a JSON object with only known keys.

    Args:
        options: what the factory was given.
        driver: the driver's name, for messages.
        allowed: the option names it takes.

    Returns:
        The options as a dict (empty for ``None``).

    Raises:
        ValueError: not an object, or an unknown key (the bridge then exits 2, and
            ``bridge-client run`` reports it as bad input).
    """
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ValueError(f"{driver} options must be a JSON object, got {type(options).__name__}")
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown {driver} option(s): {', '.join(unknown)}")
    return options


def str_option(options: Dict[str, Any], driver: str, key: str, allow_none: bool = False) -> None:
    """Check that ``options[key]``, when present, is a non-empty str (or null if allowed).

    Raises:
        ValueError: it is something else.
    """
    if key not in options:
        return
    value = options[key]
    if value is None and allow_none:
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"{driver} option {key!r} must be a non-empty string, got {value!r}")


def str_list_option(options: Dict[str, Any], driver: str, key: str) -> None:
    """Check that ``options[key]``, when present, is null or a list of str.

    Raises:
        ValueError: it is something else.
    """
    value = options.get(key)
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{driver} option {key!r} must be a list of strings, got {value!r}")


def number_option(
    options: Dict[str, Any],
    driver: str,
    key: str,
    minimum: float = 0,
    integer: bool = False,
    allow_none: bool = True,
    exclusive: bool = False,
) -> None:
    """Check that ``options[key]``, when present, is a finite number >= ``minimum`` (>
    ``minimum`` when ``exclusive``), an integer when ``integer``, or null when allowed.

    Raises:
        ValueError: it is something else.
    """
    if key not in options:
        return
    value = options[key]
    if value is None and allow_none:
        return
    kinds = (int,) if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > minimum if exclusive else value >= minimum)
    if not ok:
        what = "an integer" if integer else "a number"
        raise ValueError(
            f"{driver} option {key!r} must be {what} {'>' if exclusive else '>='} {minimum:g}, got {value!r}"
        )


def bool_option(options: Dict[str, Any], driver: str, key: str) -> None:
    """Check that ``options[key]``, when present, is true or false.

    Raises:
        ValueError: it is something else.
    """
    if key in options and not isinstance(options[key], bool):
        raise ValueError(f"{driver} option {key!r} must be true or false, got {options[key]!r}")


# ----------------------------------------------------------------------------- per driver


def _echo_int(options: Dict[str, Any], key: str, minimum: int, allow_none: bool) -> None:
    if key not in options or (options[key] is None and allow_none):
        return
    value = options[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"echo option {key!r} must be an integer >= {minimum}, got {value!r}")


def _echo(options: Any) -> Dict[str, Any]:
    opts = options_object(options, "echo", ("steps", "delay", "chunks", "fail_at"))
    delay = opts.get("delay", 0)
    if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not 0 <= delay < math.inf:
        raise ValueError(f"echo option 'delay' must be a number of seconds >= 0, got {delay!r}")
    _echo_int(opts, "steps", 1, allow_none=False)
    _echo_int(opts, "chunks", 1, allow_none=True)
    _echo_int(opts, "fail_at", 0, allow_none=True)
    return opts


def _shell(options: Any) -> Dict[str, Any]:
    opts = options_object(options, "shell", ("timeout", "shell", "keep_going"))
    timeout = opts.get("timeout", 600)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout < math.inf:
        raise ValueError(f"shell option 'timeout' must be a number of seconds > 0, got {timeout!r}")
    shell = opts.get("shell", "/bin/sh")
    if not isinstance(shell, str) or not shell:
        raise ValueError(f"shell option 'shell' must be a non-empty string, got {shell!r}")
    if not isinstance(opts.get("keep_going", False), bool):
        raise ValueError(f"shell option 'keep_going' must be true or false, got {opts['keep_going']!r}")
    return opts


_OPENAI_OPTIONS = (
    "model",
    "base_url",
    "api_key_env",
    "max_steps",
    "temperature",
    "system",
    "max_retries",
    "backoff_initial",
    "backoff_max",
    "request_timeout",
    "command_timeout",
    "max_output",
    "include_usage",
)


def _openai(options: Any) -> Dict[str, Any]:
    if isinstance(options, dict) and ("api_key" in options or "key" in options):
        raise ValueError(
            "openai: never put the API key in agent_options (they are stored in the sandbox and hashed "
            "into the bridge id); name the environment variable that holds it with api_key_env"
        )
    opts = options_object(options, "openai", _OPENAI_OPTIONS)
    if "model" not in opts:
        raise ValueError("openai option 'model' is required (e.g. model=gpt-4o-mini)")
    for key in ("model", "base_url", "api_key_env"):
        str_option(opts, "openai", key)
    str_option(opts, "openai", "system", allow_none=True)
    number_option(opts, "openai", "max_steps", minimum=1, integer=True, allow_none=False)
    number_option(opts, "openai", "max_retries", minimum=0, integer=True, allow_none=False)
    number_option(opts, "openai", "max_output", minimum=1, integer=True, allow_none=False)
    number_option(opts, "openai", "temperature", minimum=0)
    for key in ("backoff_initial", "backoff_max"):
        number_option(opts, "openai", key, minimum=0, allow_none=False)
    for key in ("request_timeout", "command_timeout"):
        number_option(opts, "openai", key, minimum=0, exclusive=True, allow_none=False)
    bool_option(opts, "openai", "include_usage")
    base = opts.get("base_url", "https://api.openai.com/v1")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"openai option 'base_url' must be an http:// or https:// URL, got {base!r}")
    return opts


_CLAUDE_CODE_OPTIONS = (
    "executable",
    "model",
    "permission_mode",
    "max_turns",
    "append_system_prompt",
    "allowed_tools",
    "extra_args",
    "continue_prompt",
    "interrupt_grace",
    "include_partial_messages",
    "agent_idle_timeout",
)


def _claude_code(options: Any) -> Dict[str, Any]:
    opts = options_object(options, "claude-code", _CLAUDE_CODE_OPTIONS)
    for key in ("executable", "continue_prompt"):
        str_option(opts, "claude-code", key)
    for key in ("model", "permission_mode", "append_system_prompt"):
        str_option(opts, "claude-code", key, allow_none=True)
    str_list_option(opts, "claude-code", "allowed_tools")
    str_list_option(opts, "claude-code", "extra_args")
    number_option(opts, "claude-code", "max_turns", minimum=1, integer=True)
    number_option(opts, "claude-code", "interrupt_grace", minimum=0)
    bool_option(opts, "claude-code", "include_partial_messages")
    number_option(opts, "claude-code", "agent_idle_timeout", minimum=0, exclusive=True)
    return opts


_CODEX_OPTIONS = (
    "executable",
    "model",
    "sandbox",
    "skip_git_repo_check",
    "extra_args",
    "continue_prompt",
    "interrupt_grace",
)


def _codex(options: Any) -> Dict[str, Any]:
    opts = options_object(options, "codex", _CODEX_OPTIONS)
    for key in ("executable", "continue_prompt"):
        str_option(opts, "codex", key)
    for key in ("model", "sandbox"):
        str_option(opts, "codex", key, allow_none=True)
    bool_option(opts, "codex", "skip_git_repo_check")
    str_list_option(opts, "codex", "extra_args")
    number_option(opts, "codex", "interrupt_grace", minimum=0)
    return opts


_ACP_OPTIONS = (
    "command",
    "args",
    "permission",
    "fs",
    "continue_prompt",
    "interrupt_grace",
    "start_timeout",
    "auth_method",
    "mcp_servers",
    "max_agents",
    "agent_idle_timeout",
)

ACP_PERMISSIONS = ("reject", "allow", "allow_always")
"""The ``acp`` driver's answers to an agent's permission requests."""


def _acp(options: Any) -> Dict[str, Any]:
    opts = options_object(options, "acp", _ACP_OPTIONS)
    if "command" not in opts:
        raise ValueError("acp option 'command' is required: the ACP agent program (e.g. command=my-agent)")
    for key in ("command", "continue_prompt"):
        str_option(opts, "acp", key)
    str_option(opts, "acp", "auth_method", allow_none=True)
    str_list_option(opts, "acp", "args")
    if opts.get("permission", "reject") not in ACP_PERMISSIONS:
        raise ValueError(
            f"acp option 'permission' must be one of {', '.join(ACP_PERMISSIONS)}, got {opts['permission']!r}"
        )
    bool_option(opts, "acp", "fs")
    number_option(opts, "acp", "interrupt_grace", minimum=0, allow_none=False)
    number_option(opts, "acp", "start_timeout", minimum=0, exclusive=True, allow_none=False)
    number_option(opts, "acp", "max_agents", minimum=1, integer=True, allow_none=False)
    number_option(opts, "acp", "agent_idle_timeout", minimum=0, exclusive=True)
    servers = opts.get("mcp_servers")
    if servers is not None and not (isinstance(servers, list) and all(isinstance(s, dict) for s in servers)):
        raise ValueError(f"acp option 'mcp_servers' must be a list of MCP server objects, got {servers!r}")
    return opts


_ACP_PRESET_OPTIONS = (
    "executable",
    "model",
    "base_url",
    "extra_args",
    "permission",
    "continue_prompt",
    "interrupt_grace",
    "start_timeout",
    "max_agents",
    "agent_idle_timeout",
)


def _acp_preset(driver: str, options: Any, extra: Sequence[str] = ()) -> Dict[str, Any]:
    """The options of a named ACP agent's driver (``drivers.acp_preset``) plus ``extra``."""
    opts = options_object(options, driver, _ACP_PRESET_OPTIONS + tuple(extra))
    for key in ("executable", "continue_prompt"):
        str_option(opts, driver, key)
    for key in ("model", "base_url", "api_key_env"):
        str_option(opts, driver, key, allow_none=True)
    str_list_option(opts, driver, "extra_args")
    _one_of(opts, driver, "permission", ACP_PERMISSIONS)
    number_option(opts, driver, "interrupt_grace", minimum=0, allow_none=False)
    number_option(opts, driver, "start_timeout", minimum=0, exclusive=True, allow_none=False)
    number_option(opts, driver, "max_agents", minimum=1, integer=True, allow_none=False)
    number_option(opts, driver, "agent_idle_timeout", minimum=0, exclusive=True)
    base = opts.get("base_url")
    if base is not None and not base.startswith(("http://", "https://")):
        raise ValueError(f"{driver} option 'base_url' must be an http:// or https:// URL, got {base!r}")
    return opts


def _one_of(opts: Dict[str, Any], driver: str, key: str, choices: Sequence[str]) -> Dict[str, Any]:
    if key in opts and opts[key] not in choices:
        raise ValueError(f"{driver} option {key!r} must be one of {', '.join(choices)}, got {opts[key]!r}")
    return opts


def _opencode(options: Any) -> Dict[str, Any]:
    opts = _acp_preset("opencode", options, ("api_key_env",))
    if opts.get("base_url") and not opts.get("model"):
        raise ValueError("opencode option 'model' is required with base_url: the model's id at that server")
    return opts


def _copilot(options: Any) -> Dict[str, Any]:
    opts = _acp_preset("copilot", options, ("provider_type",))
    return _one_of(opts, "copilot", "provider_type", ("openai", "azure", "anthropic"))


def _codex_acp(options: Any) -> Dict[str, Any]:
    opts = _acp_preset("codex-acp", options, ("api_key_env", "sandbox"))
    return _one_of(opts, "codex-acp", "sandbox", ("read-only", "workspace-write", "danger-full-access"))


def _vibe_or_aider(driver: str, options: Any) -> Dict[str, Any]:
    """vibe: an ACP preset; aider: a one-shot CLI. Both need ``model`` with ``base_url``."""
    if driver == "vibe":
        opts = _acp_preset("vibe", options, ("api_key_env",))
    else:
        keys = ("executable", "model", "base_url", "api_key_env", "edit_format", "extra_args")
        opts = options_object(options, driver, keys + ("continue_prompt", "interrupt_grace"))
        for key in ("executable", "continue_prompt", "api_key_env", "edit_format"):
            str_option(opts, driver, key)
        _acp_preset(driver, {k: v for k, v in opts.items() if k in ("model", "base_url", "extra_args")})
        number_option(opts, driver, "interrupt_grace", minimum=0)
    if opts.get("base_url") and not opts.get("model"):
        raise ValueError(f"{driver} option 'model' is required with base_url: the model's id at that server")
    return opts


_STREAM_CLI_OPTIONS = (
    "executable",
    "model",
    "approval_mode",
    "extra_args",
    "continue_prompt",
    "interrupt_grace",
)


def _qwen(options: Any) -> Dict[str, Any]:
    modes = ("plan", "default", "auto-edit", "auto", "yolo")
    extra = ("append_system_prompt", "include_partial_messages", "agent_idle_timeout")
    opts = _stream_cli("qwen", options, modes, extra=extra)
    bool_option(opts, "qwen", "include_partial_messages")
    number_option(opts, "qwen", "agent_idle_timeout", minimum=0, exclusive=True)
    return opts


def _gemini(options: Any) -> Dict[str, Any]:
    return _stream_cli("gemini", options, ("default", "auto_edit", "yolo", "plan"))


def _stream_cli(driver: str, options: Any, modes: Sequence[str], extra: Sequence[str] = ()) -> Dict[str, Any]:
    opts = options_object(options, driver, _STREAM_CLI_OPTIONS + tuple(extra))
    for key in ("executable", "continue_prompt"):
        str_option(opts, driver, key)
    for key in ("model", "approval_mode", "append_system_prompt"):
        str_option(opts, driver, key, allow_none=True)
    mode = opts.get("approval_mode")
    if mode is not None and mode not in modes:
        raise ValueError(f"{driver} option 'approval_mode' must be one of {', '.join(modes)}, got {mode!r}")
    str_list_option(opts, driver, "extra_args")
    number_option(opts, driver, "interrupt_grace", minimum=0)
    return opts


_PI_OPTIONS = (
    "executable",
    "provider",
    "model",
    "thinking",
    "tools",
    "append_system_prompt",
    "extra_args",
    "continue_prompt",
    "interrupt_grace",
    "agent_idle_timeout",
)


def _pi(options: Any) -> Dict[str, Any]:
    opts = options_object(options, "pi", _PI_OPTIONS)
    for key in ("executable", "continue_prompt"):
        str_option(opts, "pi", key)
    for key in ("provider", "model", "thinking", "append_system_prompt"):
        str_option(opts, "pi", key, allow_none=True)
    str_list_option(opts, "pi", "tools")
    str_list_option(opts, "pi", "extra_args")
    number_option(opts, "pi", "interrupt_grace", minimum=0)
    number_option(opts, "pi", "agent_idle_timeout", minimum=0, exclusive=True)
    return opts


_CHECKS: Dict[str, Callable[[Any], Dict[str, Any]]] = {
    "echo": _echo,
    "shell": _shell,
    "openai": _openai,
    "claude-code": _claude_code,
    "codex": _codex,
    "gemini": _gemini,
    "qwen": _qwen,
    "pi": _pi,
    "acp": _acp,
    "opencode": _opencode,
    "copilot": _copilot,
    "codex-acp": _codex_acp,
    "cline": lambda options: _acp_preset("cline", options, ("api_key_env",)),
    "vibe": lambda options: _vibe_or_aider("vibe", options),
    "aider": lambda options: _vibe_or_aider("aider", options),
}

BUILTIN_DRIVER_NAMES = tuple(_CHECKS)
"""The built-in drivers' names (the keys of ``bridge_client.drivers.BUILTIN_DRIVERS``)."""

CANNOT_ASK = frozenset({"echo", "codex", "gemini", "pi", "aider"})
"""The built-in drivers that cannot ask before they run a tool (their ``supports_approvals``
is false): a session of one with approvals on is refused before any bridge is launched."""


def approvals_refused(args: Sequence[str], agent_id: str) -> Optional[str]:
    """Why a session with approvals on cannot be opened on the bridge program run with
    ``args`` (``BridgeOptions.args``: ``-m bridge_client.bridge --driver NAME``), or ``None``
    when its driver may ask (or is not a built-in one: its bridge says so itself).

    The reason is the bridge's own words: ``the gemini agent cannot ask before it runs a
    tool: open the session with approvals off``.
    """
    words = list(args)
    if "--driver" not in words[:-1] or "bridge_client.bridge" not in words:
        return None
    if words[words.index("--driver") + 1] not in CANNOT_ASK:
        return None
    return f"the {agent_id} agent cannot ask before it runs a tool: open the session with approvals off"


def check_agent_options(driver: str, options: Any) -> Dict[str, Any]:
    """Check ``options`` (the ``agent_options``) for the built-in driver named ``driver``.

    Args:
        driver: a name from :data:`BUILTIN_DRIVER_NAMES`.
        options: ``None`` or a JSON object (``dict``).

    Returns:
        The options as a dict (empty for ``None``); the same object when one was given.

    Raises:
        ValueError: ``driver`` is not a built-in driver, or the options are not an object,
            name an unknown option, lack a required one, or hold a value of the wrong type or
            range. The message names the driver and the option.
    """
    check = _CHECKS.get(driver)
    if check is None:
        raise ValueError(f"unknown built-in driver {driver!r}: use {', '.join(_CHECKS)}")
    return check(options)
