"""The outage settings of the writer's uploads (writer/uploads.py): a bad value is refused
in the training process when the recorder is made, before any step."""

from __future__ import annotations

import pytest

from comgra_like.errors import ConfigurationError
from tests.conftest import TinyRun


@pytest.mark.parametrize(("name", "value"), [("COMGRA_LIKE_STORE_RETRY_SECONDS", "abc"),
                                             ("COMGRA_LIKE_STORE_RETRY_SECONDS", "-1"),
                                             ("COMGRA_LIKE_STORE_BUFFER_MB", "nan")])
def test_a_bad_outage_setting_is_refused_when_the_recorder_is_made(tmp_path, monkeypatch,
                                                                    name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=f"{name}={value!r}: give a number >= 0"):
        TinyRun(tmp_path, "g", "t", record_steps=[0])
