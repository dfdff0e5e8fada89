import pytest

from memlens.errors import QueryError
from memlens.retrieval.query import ScopeError, parse


def test_filters_alternatives_and_free_text():
    q = parse("wing=lifecore_ros2 room=architecture|contracts type=invariant|decision status=active lifecycle callbacks")
    assert q.wings == ["lifecore_ros2"]
    assert q.rooms == ["architecture", "contracts"]
    assert q.types == ["invariant", "decision"]
    assert q.statuses == ["active"]
    assert q.kinds is None
    assert q.text == "lifecycle callbacks"


def test_free_text_only_and_order_does_not_matter():
    assert parse("how do callbacks block").text == "how do callbacks block"
    q = parse("callbacks wing=ros2 block")
    assert q.wings == ["ros2"] and q.text == "callbacks block"


@pytest.mark.parametrize("text", ["  how\tdo\u00a0callbacks\n block  ", "a\x1cb\u2003c\u3000d\r\ne", "one", "", "  ",
                                  "ünïcode wörds \u200bzero-width", "a:b c|d (e) [f] 'g'"])
def test_free_text_alone_is_read_as_with_filters(text):
    """Free text without a filter or a quote takes a short way; its words are those the full parser finds."""
    assert parse(text).text == parse(text + " wing=ros2").text == " ".join(text.split())
    assert parse(text).filters() == {}


def test_repeated_key_accumulates_without_duplicates():
    q = parse("wing=ros2 wing=python|ros2 x")
    assert q.wings == ["ros2", "python"]


def test_quotes_keep_text_literal():
    q = parse('wing=python "a=b" assignment')
    assert q.text == "a=b assignment"
    assert q.wings == ["python"]
    q = parse('wing="python" type="invariant|decision" assignment')  # a quoted value is the value
    assert (q.wings, q.types, q.text) == (["python"], ["invariant", "decision"], "assignment")


@pytest.mark.parametrize(
    "query, token, fragment",
    [
        ("wings=ros2 callbacks", "wings=ros2", "unknown key 'wings'"),
        ("foo=bar callbacks", "foo=bar", "unknown key 'foo'"),
        ("type=invarient x", "type=invarient", "did you mean 'invariant'"),
        ("status=active|retired x", "status=active|retired", "unknown status 'retired'"),
        ("kind=fact| x", "kind=fact|", "empty value"),
        ("room= x", "room=", "empty value"),
        ("wing=bad/name x", "wing=bad/name", "invalid wing name"),
    ],
)
def test_bad_tokens_are_named_with_their_position(query, token, fragment):
    with pytest.raises(ScopeError) as err:
        parse(query)
    assert fragment in str(err.value)
    assert err.value.token == token
    assert query[err.value.start : err.value.end] == token
    assert "\n" not in str(err.value)


def test_unclosed_quote_is_an_error():
    with pytest.raises(QueryError, match="unclosed quote"):
        parse('wing=ros2 "callbacks')


def test_unknown_key_error_is_a_query_error():
    # the CLI maps every MemlensError (QueryError included) to exit code 2
    with pytest.raises(QueryError):
        parse("scope=x")


# -- untrusted input: the parser raises only its own errors ---------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from memlens.errors import MemlensError  # noqa: E402
from memlens.limits import MAX_QUERY_CHARS  # noqa: E402

_PIECES = st.sampled_from(
    ["wing=", "room=", "kind=", "type=", "status=", "=", "|", '"', " ", "\t", "\n", "a", "ros2", "invariant",
     "Wing=", "x=y", "\x00", "\udce9", "é", "𝕏", "_global", "..", "-", "||", "=|="]
)


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=300), st.lists(_PIECES, max_size=80).map("".join)))
def test_parser_raises_only_memlens_errors(query):
    try:
        parsed = parse(query)
    except MemlensError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 1000  # one line, bounded
        return
    assert isinstance(parsed.text, str)
    for values in parsed.filters().values():
        assert values and all(isinstance(v, str) and v for v in values)


@settings(max_examples=25, deadline=None, database=None)
@given(st.integers(min_value=MAX_QUERY_CHARS - 50, max_value=MAX_QUERY_CHARS * 3), st.sampled_from(["a", "=", '"', "x=", " "]))
def test_parser_bounds_long_input(n, piece):
    query = (piece * n)[:n]
    if n > MAX_QUERY_CHARS:
        with pytest.raises(QueryError, match="limit is"):
            parse(query)
    else:
        try:
            parse(query)
        except MemlensError as exc:
            assert len(str(exc)) < 1000  # a huge token is shortened in the message
