"""The settings table drives loading: precedence, one on/off vocabulary, one message shape."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from shelfhand.core.errors import ConfigurationError
from shelfhand.core.settings import Settings, check_values, resolve_settings
from shelfhand.core.settings_table import SETTINGS, SETTINGS_BY_NAME


def write_toml(workspace: Path, body: str) -> None:
    (workspace / "shelfhand.toml").write_text(f"[shelfhand]\n{body}", encoding="utf-8")


def test_a_flag_wins_over_the_environment_which_wins_over_the_file_over_the_default(
    tmp_path: Path,
) -> None:
    write_toml(tmp_path, "temperature = 0.3\nmax_tokens = 300\ncontext_tokens = 2048\n")
    env = {"SHELFHAND_TEMPERATURE": "0.7", "SHELFHAND_MAX_TOKENS": "500"}

    resolved = resolve_settings(tmp_path, env=env, flags={"max_tokens": 64})

    s = resolved.settings
    assert (s.max_tokens, s.temperature, s.context_tokens, s.tool_mode) == (64, 0.7, 2048, "native")
    assert {name: resolved.sources[name] for name in ("max_tokens", "temperature")} == {
        "max_tokens": "flag",
        "temperature": "env",
    }
    assert (resolved.sources["context_tokens"], resolved.sources["tool_mode"]) == (
        "toml",
        "default",
    )


def test_the_workspace_comes_from_the_argument_then_the_environment_then_the_default(
    tmp_path: Path,
) -> None:
    env = {"SHELFHAND_WORKSPACE": str(tmp_path / "from-env")}

    given = resolve_settings(tmp_path, env=env)
    from_env = resolve_settings(env=env)
    default = resolve_settings(env={})

    assert (given.settings.workspace, given.sources["workspace"]) == (tmp_path, "flag")
    assert (from_env.settings.workspace, from_env.sources["workspace"]) == (
        tmp_path / "from-env",
        "env",
    )
    assert (default.settings.workspace, default.sources["workspace"]) == (
        Path(".shelfhand"),
        "default",
    )


def test_an_empty_environment_variable_leaves_the_file_to_decide(tmp_path: Path) -> None:
    write_toml(tmp_path, 'model = "qwen"\n')

    resolved = resolve_settings(tmp_path, env={"SHELFHAND_MODEL": ""})

    assert (resolved.settings.model, resolved.sources["model"]) == ("qwen", "toml")


@pytest.mark.parametrize("name", ["compress", "query_rewrite"])
@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("on", True),
        ("ON", True),
        ("true", True),
        ("Yes", True),
        ("1", True),
        ("off", False),
        ("False", False),
        ("no", False),
        ("0", False),
    ],
)
def test_every_boolean_setting_takes_the_one_on_off_vocabulary(
    tmp_path: Path, name: str, word: str, value: bool
) -> None:
    env_key = SETTINGS_BY_NAME[name].env
    assert env_key is not None

    assert getattr(Settings.load(tmp_path, env={env_key: word}), name) is value


@pytest.mark.parametrize("name", ["compress", "query_rewrite"])
def test_toml_booleans_are_on_and_off(tmp_path: Path, name: str) -> None:
    write_toml(tmp_path, f"{name} = true\n")
    assert getattr(Settings.load(tmp_path, env={}), name) is True
    write_toml(tmp_path, f"{name} = false\n")
    assert getattr(Settings.load(tmp_path, env={}), name) is False


@pytest.mark.parametrize("name", ["compress", "query_rewrite"])
@pytest.mark.parametrize("word", ["llm", "maybe", "enabled"])
def test_any_other_word_is_refused_naming_the_setting_and_the_words(
    tmp_path: Path, name: str, word: str
) -> None:
    env_key = SETTINGS_BY_NAME[name].env
    assert env_key is not None

    with pytest.raises(ConfigurationError) as err:
        Settings.load(tmp_path, env={env_key: word})

    message = str(err.value)
    assert message.startswith(f"{name} must be on or off")
    assert "on, off, true, false, yes, no, 1, 0" in message
    assert repr(word) in message and env_key in message


def test_a_bad_value_in_the_file_names_the_setting_the_value_and_where_to_set_it(
    tmp_path: Path,
) -> None:
    write_toml(tmp_path, "rerank_candidates = 500\n")

    with pytest.raises(ConfigurationError) as err:
        Settings.load(tmp_path, env={})

    assert str(err.value) == (
        "rerank_candidates is out of range: must be between 1 and 200, not 500 "
        "(set SHELFHAND_RERANK_CANDIDATES or rerank_candidates in shelfhand.toml)"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("chunk_tokens = 400.5\n", "chunk_tokens must be a whole number, not 400.5"),
        ("embed_timeout = 0\n", "embed_timeout is out of range: must be above 0 and at most 3600"),
        ("rerank_timeout = 0\n", "rerank_timeout is out of range: must be above 0 and at most"),
        ("chunk_overlap = 400\n", "chunk_overlap (400) must be below chunk_tokens (400)"),
        ('tool_mode = "xml"\n', "tool_mode 'xml' is not one of native, plain, constrained"),
    ],
)
def test_a_file_value_is_checked_like_an_environment_value(
    tmp_path: Path, body: str, message: str
) -> None:
    write_toml(tmp_path, body)

    with pytest.raises(ConfigurationError) as err:
        Settings.load(tmp_path, env={})

    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    ("name", "env_key"),
    [
        ("embed_timeout", "SHELFHAND_EMBED_TIMEOUT"),
        ("turn_timeout", "SHELFHAND_TURN_TIMEOUT"),
        ("trace_retention_days", "SHELFHAND_TRACE_RETENTION_DAYS"),
    ],
)
@pytest.mark.parametrize("value", ["inf", "1e12"])
def test_a_wait_too_long_to_be_one_is_refused(
    tmp_path: Path, name: str, env_key: str, value: str
) -> None:
    # SHELFHAND_EMBED_TIMEOUT=1e12 was taken: every search's embedding then failed
    # (OverflowError: timestamp out of range), and 2 runs in 10 aborted at exit (134)
    with pytest.raises(
        ConfigurationError, match=f"^{name} is out of range: must be above 0 and at most"
    ):
        Settings.load(tmp_path, env={env_key: value})


def test_a_bad_flag_says_it_came_from_the_command_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"temperature .*given on the command line"):
        check_values({"temperature": 5.0}, source="flag")
    assert check_values({"temperature": 0.5, "max_tokens": None}, source="flag") == {
        "temperature": 0.5
    }


def test_a_secret_url_is_never_quoted_in_a_refusal(tmp_path: Path) -> None:
    env = {"SHELFHAND_REDIS_URL": "http://:hunter2@cache:6379"}

    with pytest.raises(ConfigurationError) as err:
        Settings.load(tmp_path, env=env)

    assert "redis_url" in str(err.value) and "hunter2" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "told"),
    [
        ('[shelfhand]\nmodle = "qwen"\n', "'modle' under [shelfhand] is not a setting (did you mean 'model'?)"),
        ('[shelfhand]\nretrival_mode = "pg"\n', "did you mean 'retrieval_mode'?"),
        ('[shelfhand]\nrerank_api_key = "in-a-file"\n', "a secret is kept out of files): set SHELFHAND_RERANK_API_KEY"),
        ('[shelfhand]\nworkspace = "/elsewhere"\n', "'workspace' is not read from shelfhand.toml: set SHELFHAND_WORKSPACE"),
        ("[budget.tenant]\ntokens_per_day = 5\n", "'budget' is not read (did you mean 'budgets'?)"),
        ('[shelfhands]\nmodel = "qwen"\n', "(did you mean 'shelfhand'?)"),
        ('modle = "qwen"\n[shelfhand]\n', "(did you mean 'model' under [shelfhand]?)"),
        ('[queue]\nx = 1\n', "'queue' is not read; the file holds [shelfhand] (the settings), [limits]"),
        ('[tools]\ndesk = "desk_tools"\n', "'tools' is above [shelfhand], where no setting is read: move it under [shelfhand] (or SHELFHAND_TOOLS)"),
    ],
)  # fmt: skip
def test_what_no_setting_reads_is_refused_naming_what_was_meant(
    tmp_path: Path, text: str, told: str
) -> None:
    (tmp_path / "shelfhand.toml").write_text(text, encoding="utf-8")

    with pytest.raises(ConfigurationError) as err:
        resolve_settings(tmp_path, env={})

    assert told in str(err.value) and "in-a-file" not in str(err.value)


def test_every_table_the_file_may_hold_is_read_without_complaint(tmp_path: Path) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand]\nmodel = "qwen"\n[limits]\nmax_pages = 3\n[budgets.tenant]\n'
        'tokens_per_day = 5\n[[api_keys]]\nkey = "k"\ntenant = "t"\nuser = "u"\n'
        '[mcp.servers.files]\ncommand = "true"\n',
        encoding="utf-8",
    )

    settings = resolve_settings(tmp_path, env={}).settings

    assert settings.model == "qwen" and settings.limits == {"max_pages": 3}


def test_the_table_names_every_field_of_settings_with_its_default() -> None:
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    tables = ("limits", "budgets")  # tables of shelfhand.toml, not settings of the table
    assert [s.name for s in SETTINGS] == [n for n in fields if n not in tables]
    for setting in SETTINGS[1:]:  # the workspace has no default: it is always resolved
        assert fields[setting.name].default == setting.default, setting.name
    assert all(not s.secret or not fields[s.name].repr for s in SETTINGS)


@pytest.mark.parametrize(
    "body",
    [
        'retrieval_mode = "keyword"\n',  # the file's first line, no table: was ignored
        'retrieval_mode = "keyword"\n[shelfhand]\nmax_tokens = 64\n',
        '[prices."qwen-plus"]\ninput = 0.8\noutput = 2.0\n',  # [shelfhand.prices."qwen-plus"]
    ],
)
def test_a_setting_above_the_shelfhand_table_fails_at_start_naming_where_it_goes(
    tmp_path: Path, body: str
) -> None:
    (tmp_path / "shelfhand.toml").write_text(body, encoding="utf-8")

    with pytest.raises(ConfigurationError, match=r"is above \[shelfhand\].*move it under"):
        resolve_settings(tmp_path, env={})


def test_the_other_tables_of_the_file_stay_where_they_are(tmp_path: Path) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand]\nretrieval_mode = "keyword"\n[limits]\nmax_file_mb = 5\n'
        '[[api_keys]]\nkey = "k"\ntenant = "t"\nuser = "u"\n',
        encoding="utf-8",
    )
    assert resolve_settings(tmp_path, env={}).settings.retrieval_mode == "keyword"


@pytest.mark.parametrize("value", ["42", '["qwen"]', "true", '{ name = "qwen" }'])
def test_a_text_setting_given_another_toml_type_fails_at_start(tmp_path: Path, value: str) -> None:
    # model = 42 was taken as the model "42", a list as "['qwen']"
    write_toml(tmp_path, f"model = {value}\n")

    with pytest.raises(ConfigurationError, match=r"model must be text \(a string in quotes"):
        resolve_settings(tmp_path, env={})


def test_an_environment_variable_nothing_reads_is_warned_about_with_the_nearest_name(
    tmp_path: Path,
) -> None:
    env = {
        "SHELFHAND_RETRIVAL_MODE": "pg",
        "SHELFHAND_ZZZ": "1",
        "SHELFHAND_API_KEYS": "{}",
        "SHELFHAND_TEST_WORKERS": "2",
        "RETRIVAL_MODE": "pg",  # not ours
    }

    resolved = resolve_settings(tmp_path, env=env)

    assert resolved.settings.retrieval_mode == "auto"
    assert resolved.warnings == (
        "SHELFHAND_RETRIVAL_MODE is not a shelfhand setting: it is ignored "
        "(did you mean 'SHELFHAND_RETRIEVAL_MODE'?)",
        "SHELFHAND_ZZZ is not a shelfhand setting: it is ignored",
    )


def test_every_shelfhand_variable_the_code_reads_is_known(tmp_path: Path) -> None:
    root = Path(__file__).parents[2]
    names = set()
    for folder in ("src", "scripts", "bench", "tests"):
        for path in (root / folder).rglob("*"):
            if path.suffix in {".py", ".sh", ""} and path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace")
                names.update(re.findall(r"SHELFHAND_[A-Z0-9_]*[A-Z0-9]", text))
    names -= {"SHELFHAND_RETRIVAL_MODE", "SHELFHAND_ZZZ", "SHELFHAND_MODLE", "SHELFHAND_MODLE_ONCE"}

    warnings = resolve_settings(tmp_path, env=dict.fromkeys(names, "")).warnings

    assert warnings == ()


def test_loading_logs_each_warning_once_a_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"SHELFHAND_MODLE_ONCE": "qwen"}

    with caplog.at_level("WARNING", logger="shelfhand.core.settings"):
        Settings.load(tmp_path, env=env)
        Settings.load(tmp_path, env=env)

    told = [r.getMessage() for r in caplog.records if "SHELFHAND_MODLE_ONCE" in r.getMessage()]
    assert told == ["SHELFHAND_MODLE_ONCE is not a shelfhand setting: it is ignored"]


def test_the_tools_setting_reads_module_names_from_the_file_or_the_environment(
    tmp_path: Path,
) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand]\ntools = ["desk_tools", "acme.crm:CRM_TOOLS", "desk_tools"]\n',
        encoding="utf-8",
    )
    assert resolve_settings(tmp_path, env={}).settings.tools == (
        "desk_tools",
        "acme.crm:CRM_TOOLS",
    )
    env = {"SHELFHAND_TOOLS": " desk_tools:order_status , ,acme.crm "}
    assert resolve_settings(tmp_path, env=env).settings.tools == (
        "desk_tools:order_status",
        "acme.crm",
    )
    assert resolve_settings(tmp_path, env={"SHELFHAND_TOOLS": ""}).settings.tools == (
        "desk_tools",
        "acme.crm:CRM_TOOLS",
    )


@pytest.mark.parametrize(
    "value", ['"desk tools"', '["desk_tools", 3]', '["desk_tools:a:b"]', '["../desk"]', "{}"]
)
def test_a_tools_setting_that_is_not_module_names_fails_at_start(
    tmp_path: Path, value: str
) -> None:
    (tmp_path / "shelfhand.toml").write_text(f"[shelfhand]\ntools = {value}\n", encoding="utf-8")
    with pytest.raises(ConfigurationError) as err:
        resolve_settings(tmp_path, env={})
    assert str(err.value).startswith("tools must be ")
