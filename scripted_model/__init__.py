"""A scripted stand-in for the Anthropic Messages API, driving the real Claude Code CLI."""

from scripted_model.hermetic import gateway_token, hermetic_env, sdk_env
from scripted_model.protocol import (
    Brain,
    Fault,
    FaultKind,
    Reply,
    ToolCall,
    ToolExchange,
    Turn,
)
from scripted_model.server import ScriptedModelServer

__all__ = [
    "Brain",
    "Fault",
    "FaultKind",
    "Reply",
    "ScriptedModelServer",
    "ToolCall",
    "ToolExchange",
    "Turn",
    "gateway_token",
    "hermetic_env",
    "sdk_env",
]
