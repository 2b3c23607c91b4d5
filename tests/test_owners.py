"""`attribution.owners`: the TOML owners file, CODEOWNERS-style precedence, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from attribution.owners import UNOWNED, load_owners

EXAMPLE = """\
# who fixes what
[[owner]]
pattern = "*gemm*"        # fnmatch glob over kernel, NVTX range or mechanism names
owner = "@matmul-team"

[[owner]]
pattern = "idle.*"
owner = "@runtime"

[[owner]]
pattern = "idle.host_stall"
owner = "@data-loader"

[[owner]]
pattern = "copy:HtoD/*"
owner = "@io"
"""


def test_example_file() -> None:
    owners = load_owners(EXAMPLE)
    assert len(owners) == 4
    assert owners.owner_for("ampere_sgemm_128x64_nn") == "@matmul-team"
    assert owners.owner_for("kernel:ampere_sgemm_128x64_nn") == "@matmul-team"
    assert owners.owner_for("idle.host_stall") == "@data-loader"
    assert owners.owner_for("idle.launch_gap") == "@runtime"
    assert owners.owner_for("copy:HtoD/pageable") == "@io"
    assert owners.owner_for("copy:DtoH/pageable") == UNOWNED
    assert owners.owner_for("flash_fwd_kernel") == UNOWNED


def test_last_matching_rule_wins() -> None:
    text = """
[[owner]]
pattern = "*"
owner = "@everyone"
[[owner]]
pattern = "*attn*"
owner = "@attention"
[[owner]]
pattern = "*"
owner = "@catch-all"
"""
    owners = load_owners(text)
    # the later catch-all overrides the more specific rule before it, as in CODEOWNERS
    assert owners.owner_for("flash_attn_fwd") == "@catch-all"
    reordered = load_owners(text.replace('"*attn*"', '"__x__"') + """
[[owner]]
pattern = "*attn*"
owner = "@attention"
""")
    assert reordered.owner_for("flash_attn_fwd") == "@attention"
    assert reordered.owner_for("gemm") == "@catch-all"


def test_kernel_prefix_rules_and_bare_names() -> None:
    owners = load_owners("""
[[owner]]
pattern = "kernel:*"
owner = "@kernels"
[[owner]]
pattern = "vectorized_elementwise_kernel"
owner = "@pointwise"
""")
    assert owners.owner_for("kernel:vectorized_elementwise_kernel") == "@pointwise"
    assert owners.owner_for("kernel:other") == "@kernels"
    # a bare name does not get the prefix added
    assert owners.owner_for("other") == UNOWNED


def test_matching_is_case_sensitive_and_whole_name() -> None:
    owners = load_owners('[[owner]]\npattern = "gemm"\nowner = "@m"\n')
    assert owners.owner_for("gemm") == "@m"
    assert owners.owner_for("sgemm") == UNOWNED
    assert owners.owner_for("GEMM") == UNOWNED
    # names with brackets and template arguments (C++ kernels) are matched literally by '*'
    star = load_owners('[[owner]]\npattern = "void at::native::*"\nowner = "@aten"\n')
    assert star.owner_for("void at::native::elementwise<float>(int, [lambda])") == "@aten"


def test_empty_file_owns_nothing() -> None:
    owners = load_owners("")
    assert len(owners) == 0
    assert owners.owner_for("anything") == UNOWNED


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("[[owner]\npattern = 'x'", "not valid TOML"),
        ('[[owner]]\npattern = "x"\n', "line 1: owner rule #1: missing 'owner'"),
        ('[[owner]]\nowner = "@a"\n', "missing 'pattern'"),
        ('[[owner]]\npattern = "x"\nowner = "@a"\n\n[[owner]]\npattern = 3\nowner = "@b"\n',
         "line 5: owner rule #2: 'pattern' must be a non-empty string"),
        ('[[owner]]\npattern = ""\nowner = "@a"\n', "'pattern' must be a non-empty string"),
        ('[[owner]]\npattern = "x"\nowner = "  "\n', "'owner' must be a non-empty string"),
        ('[[owner]]\npattern = "x"\nowner = "@a"\nteam = "b"\n', "unknown key 'team'"),
        ('owner = "@a"\n', "array of tables"),
        ('[[owners]]\npattern = "x"\nowner = "@a"\n', "unknown top-level key 'owners'"),
    ],
)
def test_bad_files_raise_value_error_with_where_and_what(text: str, what: str) -> None:
    with pytest.raises(ValueError) as e:
        load_owners(text)
    assert what in str(e.value)


def test_toml_error_names_the_line() -> None:
    with pytest.raises(ValueError) as e:
        load_owners('[[owner]]\npattern = "x"\nowner = @a\n')
    assert "line 3" in str(e.value)


def test_a_deeply_nested_file_is_a_value_error_not_a_recursion_error(tmp_path: Path) -> None:
    text = "a = " + "[" * 5000 + "]" * 5000 + "\n"  # before: RecursionError, internal error
    with pytest.raises(ValueError, match="nested too deeply"):
        load_owners(text)
    from ppwtop.cli.diff import read_owners
    from ppwtop.errors import InputError

    f = tmp_path / "owners.toml"
    f.write_text(text)
    with pytest.raises(InputError, match=r"owners\.toml: not a usable owners file"):
        read_owners(f)
