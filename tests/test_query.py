import pytest

from memlens.errors import QueryError
from memlens.query import ScopeError, parse


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


def test_repeated_key_accumulates_without_duplicates():
    q = parse("wing=ros2 wing=python|ros2 x")
    assert q.wings == ["ros2", "python"]


def test_quotes_keep_text_literal():
    q = parse('wing=python "a=b" assignment')
    assert q.text == "a=b assignment"
    assert q.wings == ["python"]


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
