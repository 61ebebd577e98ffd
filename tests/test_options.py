"""Each option set is declared once; every surface derived from it agrees with it field by field.

SearchSettings and IndexSettings declare their options (encoders.options);
the CLI's flags, the server's POST models and GET parameters, the Python
API's keywords and eval's system options must offer the same names with the
same defaults, choices and help, so that none can drift from another.
"""
import argparse
import dataclasses
import inspect

import pytest

from propdex.cli import build_parser
from propdex.encoders.options import add_flags, fields_of, given, option
from propdex.indexer.build import IndexWriter
from propdex.indexer.settings import IndexSettings
from propdex.retriever.settings import SearchSettings


def subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser([name])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.option_strings}


@pytest.mark.parametrize("command, settings", [("search", SearchSettings), ("index", IndexSettings)])
def test_cli_flags_are_the_declared_options(command, settings):
    cli = flags(subcommand(command))
    for d in fields_of(settings):
        action = cli[d.name]
        assert d.flag in action.option_strings
        assert action.help.startswith(d.option.help)
        assert action.default is None  # not given: the settings' own default applies
        if d.option.choices is not None:
            assert tuple(action.choices) == tuple(d.option.choices)
    # And nothing the settings lack is spelled as a search/index option there.
    declared = {d.name for d in fields_of(settings)}
    assert declared <= set(cli)


def test_cli_defaults_are_the_settings_defaults():
    args = subcommand("search").parse_args(["DIR", "q"])
    assert SearchSettings.of(**given(args, SearchSettings)) == SearchSettings()
    args = subcommand("index").parse_args(["in", "--out", "o"])
    assert IndexSettings(**given(args, IndexSettings)) == IndexSettings()
    args = subcommand("index").parse_args(["in", "--out", "o", "--no-bm25", "--shard-docs", "7", "--store", "float16"])
    assert IndexSettings(**given(args, IndexSettings)) == IndexSettings(shard_docs=7, bm25=False, store="float16")


def test_server_request_fields_are_the_declared_options():
    pytest.importorskip("fastapi")
    from propdex.serve import ContextRequest, GetOptions, SearchOptions, SearchRequest

    declared = [d.name for d in fields_of(SearchSettings)]
    for model in (SearchOptions, GetOptions):
        assert list(model.model_fields) == declared
        for d in fields_of(SearchSettings):
            field = model.model_fields[d.name]
            assert field.default is None and field.description == d.option.help
    assert set(SearchRequest.model_fields) == {*declared, "query", "queries"}
    assert set(ContextRequest.model_fields) == {*declared, "query", "words"}
    # A GET's filter is the command line's clauses; a POST's, the JSON object.
    assert GetOptions.model_fields["where"].annotation == list[str] | None


@pytest.mark.parametrize("function, settings, explicit", [
    ("propdex.Index.create", IndexSettings, ("shard_docs", "factory", "backend", "bm25", "store", "code_bytes")),
    ("propdex.indexer.build.IndexWriter", IndexSettings, ("shard_docs", "factory", "backend", "bm25", "store", "code_bytes")),
    ("propdex.Index.search", SearchSettings, ("k", "level")),
    ("propdex.Index.search_batch", SearchSettings, ("k", "level")),
])
def test_api_keywords_have_the_declared_defaults(function, settings, explicit):
    import propdex

    target = {"propdex.Index.create": propdex.Index.create, "propdex.indexer.build.IndexWriter": IndexWriter,
              "propdex.Index.search": propdex.Index.search, "propdex.Index.search_batch": propdex.Index.search_batch}[function]
    params = inspect.signature(target).parameters
    defaults = {d.name: d.default for d in fields_of(settings)}
    for name in explicit:
        assert params[name].default == defaults[name], name
    # The options it does not spell out still reach the settings.
    assert set(defaults) - set(explicit) <= set(params) or any(p.kind is p.VAR_KEYWORD for p in params.values())


def test_eval_system_options_are_the_search_options():
    from propdex.eval.systems import SEARCH_OPTIONS

    assert set(SEARCH_OPTIONS) == {d.name for d in fields_of(SearchSettings)} - {"k", "level", "hybrid", "bm25", "where"}


def test_a_declaration_checks_types_choices_and_minimums():
    @dataclasses.dataclass(frozen=True)
    class Toy:
        size: int = option(3, "size", minimum=1)
        mode: str = option("a", "mode", choices=("a", "b"))
        turns: int = option(1, "turns", choices=(1, 2))
        on: bool = option(True, "a switch")

        def __post_init__(self):
            from propdex.encoders.options import check

            check(self)

    assert Toy(size="4", on="0") == Toy(size=4, on=False)
    for bad, message in [({"size": 0}, "size must be at least 1, got 0"), ({"mode": "c"}, "unknown mode 'c'; choose from a, b"),
                         ({"turns": 3}, "turns must be 1 or 2, got 3"), ({"size": "x"}, "size: expected an integer")]:
        with pytest.raises(ValueError, match=message):
            Toy(**bad)
    parser = argparse.ArgumentParser()
    add_flags(parser, Toy)
    assert given(parser.parse_args(["--no-on", "--mode", "b"]), Toy) == {"on": False, "mode": "b"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "c"])


def test_the_manifest_records_every_index_setting():
    """The manifest's typed `settings` record reads back what IndexSettings declares, field for field."""
    from propdex.indexer.manifest import Settings

    assert [f.name for f in dataclasses.fields(Settings)] == [d.name for d in fields_of(IndexSettings)]
