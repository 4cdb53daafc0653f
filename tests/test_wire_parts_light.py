"""Light part objects: slots instead of a ``__dict__``, and dataclasses-json only
when a schema is asked for."""
from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from bridge_client.wire.parts import PART_TYPES, SessionState, TextDelta, TurnState, part_from_dict


def test_parts_and_states_have_slots_not_a_dict():
    for value in (TextDelta(1, 0, 1, "x"), part_from_dict(TextDelta(1, 0, 1, "x").to_dict()),
                  SessionState("s", 1, None), TurnState(1, "a", "b", "s", "t", "p", "x")):
        assert not hasattr(value, "__dict__"), type(value).__name__
    for cls in PART_TYPES.values():
        assert "__slots__" in cls.__dict__, cls.__name__


@pytest.mark.parametrize("value", [TextDelta(1, 0, 1, "x"), SessionState("s", 2, {"a": [1]})])
def test_slotted_values_pickle_and_stay_frozen(value):
    assert pickle.loads(pickle.dumps(value)) == value
    with pytest.raises(AttributeError):
        value.index = 5  # type: ignore[misc,union-attr]
    with pytest.raises(AttributeError):
        value.revision = 3  # type: ignore[misc,union-attr]


def test_reading_parts_does_not_import_dataclasses_json_until_a_schema_is_asked():
    code = (
        "import sys\n"
        "import bridge_client.bridge.server, bridge_client.client.turn\n"
        "from bridge_client.wire.parts import TextDelta, part_from_dict\n"
        "p = part_from_dict({'type': 'text-delta', 'index': 1, 'step': 0, 'attempt': 1, 'text': 'x'})\n"
        "assert p.to_json() and TextDelta.from_json(p.to_json()) == p\n"
        "assert 'dataclasses_json' not in sys.modules and 'marshmallow' not in sys.modules\n"
        "assert TextDelta.schema().dump(p) == {k: v for k, v in p.to_dict().items() if k != 'type'}\n"
        "assert 'dataclasses_json' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
