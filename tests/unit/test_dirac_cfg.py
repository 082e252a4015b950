"""DIRAC CFG parsing and share corrections loaded from CFG and TOML."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fairmatch.priority.dirac_cfg import (
    CfgError,
    corrections_from_cfg,
    load_corrections,
    parse_cfg,
    split_list,
)
from fairmatch.priority.settings import CorrectionsConfig, InstanceConfig, SliceConfig

REPO = Path(__file__).resolve().parents[2]
# the example shipped with the repository, a verbatim copy of the one in
# shared/examples beside the repository (checked when that one is there)
REPO_EXAMPLE = REPO / "config" / "share-corrections.cfg"
SHARED_EXAMPLE = REPO.parent / "shared" / "examples" / "share-corrections.cfg"
needs_shared = pytest.mark.skipif(not SHARED_EXAMPLE.is_file(), reason=f"{SHARED_EXAMPLE} is not there")

WEEK = SliceConfig(time_span=604800, weight=80, max_correction=2)
HOUR = SliceConfig(time_span=3600, weight=20, max_correction=5)
EXPECTED_EXAMPLE = CorrectionsConfig(
    instances={
        "GroupsInstance": InstanceConfig(
            group=None, max_global_correction=3, slices={"WeekSlice": WEEK, "HourSlice": HOUR}
        ),
        "lhcb_userInstance": InstanceConfig(
            group="lhcb_user", max_global_correction=3, slices={"WeekSlice": WEEK, "HourSlice": HOUR}
        ),
    }
)

ONE_INSTANCE = """
ShareCorrections
{
  WMSHistory
  {
    GroupsInstance
    {
      MaxGlobalCorrection = 4
      WeekSlice
      {
        TimeSpan = 604800
        Weight = 80
        MaxCorrection = 2
      }
    }
  }
}
"""


def cfg(text: str) -> dict:
    return parse_cfg(textwrap.dedent(text))


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# ------------------------------------------------------------------------ parser


def test_example_parses_to_nested_dicts_of_strings() -> None:
    tree = parse_cfg(REPO_EXAMPLE.read_text())
    share_corrections = tree["ShareCorrections"]
    assert share_corrections["ShareCorrectorsToStart"] == "WMSHistory"
    assert share_corrections["WMSHistory"]["lhcb_userInstance"]["Group"] == "lhcb_user"
    assert share_corrections["WMSHistory"]["GroupsInstance"]["HourSlice"] == {
        "TimeSpan": "3600",
        "Weight": "20",
        "MaxCorrection": "5",
    }


def test_brace_on_same_line_next_line_and_empty_section() -> None:
    tree = cfg(
        """
        A {
          x = 1
          B
             {
            y = 2
          }
          Empty { }
        }
        """
    )
    assert tree == {"A": {"x": "1", "B": {"y": "2"}, "Empty": {}}}


def test_comments_blank_lines_and_whitespace() -> None:
    tree = cfg(
        """
        # whole-line comment

            Section   # trailing comment on a section name
        {
        \tkey   =   some value   # trailing comment
          spaced=tight
          empty =
        }   # after a closing brace
        """
    )
    assert tree == {"Section": {"key": "some value", "spaced": "tight", "empty": ""}}


def test_values_keep_equal_signs_and_list_values_stay_strings() -> None:
    tree = cfg(
        """
        url = https://example.org/a?b=c
        sites = LCG.CERN.cern,  LCG.CNAF.it ,,LCG.PIC.es
        """
    )
    assert tree["url"] == "https://example.org/a?b=c"
    assert tree["sites"] == "LCG.CERN.cern,  LCG.CNAF.it ,,LCG.PIC.es"
    assert split_list(tree["sites"]) == ["LCG.CERN.cern", "LCG.CNAF.it", "LCG.PIC.es"]
    assert split_list("") == []


def test_plus_equal_appends_with_a_comma() -> None:
    tree = cfg(
        """
        Users = alice
        Users += bob
        Users+=carol
        Fresh += first
        """
    )
    assert tree["Users"] == "alice, bob, carol"
    assert split_list(tree["Users"]) == ["alice", "bob", "carol"]
    assert tree["Fresh"] == "first"  # += on an unset option sets it


def test_section_opened_twice_is_merged_and_last_option_wins() -> None:
    tree = cfg(
        """
        S {
          a = 1
        }
        S {
          a = 2
          b = 3
        }
        """
    )
    assert tree == {"S": {"a": "2", "b": "3"}}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("A\n{\n  x = 1\n", 1, "never closed"),
        ("A {\n  B {\n  }\n", 1, "'A' is never closed"),
        ("x = 1\n}\n", 2, "closes no open section"),
        ("A {\n}\n}\n", 3, "closes no open section"),
        ("A {\n  not an option\n}\n", 2, "expected 'key = value'"),
        ("A {\n  Lonely\n  x = 1\n}\n", 2, "neither an option"),
        ("A {\n  Lonely\n}\n", 2, "neither an option"),
        ("Trailing\n", 1, "neither an option"),
        ("\n\n{\n}\n", 3, "without a section name"),
        ("x = 1\nx {\n}\n", 2, "already an option"),
        ("x {\n}\nx = 1\n", 3, "already a section"),
    ],
)
def test_errors_name_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(CfgError, match=words) as caught:
        parse_cfg(text)
    assert caught.value.line == line
    assert str(caught.value).startswith(f"{line}: ")


# ------------------------------------------------------------- share corrections


@pytest.mark.parametrize("path", [pytest.param(SHARED_EXAMPLE, marks=needs_shared), REPO_EXAMPLE])
def test_example_file_loads_unchanged(path: Path) -> None:
    assert load_corrections(path) == EXPECTED_EXAMPLE


@needs_shared
def test_repo_copy_is_verbatim() -> None:
    assert REPO_EXAMPLE.read_bytes() == SHARED_EXAMPLE.read_bytes()


def test_max_global_correction_alias() -> None:
    config = corrections_from_cfg(parse_cfg(ONE_INSTANCE))
    assert config.instances["GroupsInstance"].max_global_correction == 4


def test_both_max_global_spellings_is_an_error() -> None:
    text = ONE_INSTANCE.replace("MaxGlobalCorrection = 4", "MaxGlobalCorrection = 4\nMaxGlobalCorrectionFactor = 3")
    with pytest.raises(CfgError, match="not both"):
        corrections_from_cfg(parse_cfg(text))


def test_missing_max_global_takes_the_model_default() -> None:
    text = ONE_INSTANCE.replace("MaxGlobalCorrection = 4", "")
    assert corrections_from_cfg(parse_cfg(text)).instances["GroupsInstance"].max_global_correction == 3


@pytest.mark.parametrize(
    "tree",
    [
        pytest.param(parse_cfg(ONE_INSTANCE), id="root-contains-ShareCorrections"),
        pytest.param(parse_cfg(ONE_INSTANCE)["ShareCorrections"], id="root-is-ShareCorrections"),
        pytest.param(parse_cfg(ONE_INSTANCE)["ShareCorrections"]["WMSHistory"], id="root-is-WMSHistory"),
        pytest.param({"Operations": {"Defaults": {"JobScheduling": parse_cfg(ONE_INSTANCE)}}}, id="deep-in-Operations"),
    ],
)
def test_wms_history_is_found_wherever_the_tree_starts(tree: dict) -> None:
    config = corrections_from_cfg(tree)
    assert list(config.instances) == ["GroupsInstance"]
    assert config.instances["GroupsInstance"].slices["WeekSlice"] == WEEK


def test_share_correctors_to_start_without_wms_history_gives_no_instances() -> None:
    text = REPO_EXAMPLE.read_text().replace("ShareCorrectorsToStart = WMSHistory", "ShareCorrectorsToStart =")
    assert corrections_from_cfg(parse_cfg(text)) == CorrectionsConfig()


def test_share_correctors_to_start_listing_wms_history_among_spaces() -> None:
    text = REPO_EXAMPLE.read_text().replace(
        "ShareCorrectorsToStart = WMSHistory",
        "ShareCorrectorsToStart = \n ShareCorrectorsToStart += WMSHistory",
    )
    assert corrections_from_cfg(parse_cfg(text)) == EXPECTED_EXAMPLE


def test_unknown_corrector_is_an_error() -> None:
    text = REPO_EXAMPLE.read_text().replace(
        "ShareCorrectorsToStart = WMSHistory", "ShareCorrectorsToStart = WMSHistory, MonitoringHistory"
    )
    with pytest.raises(CfgError, match=r"unknown corrector.*MonitoringHistory"):
        corrections_from_cfg(parse_cfg(text))


def test_other_correctors_sections_are_ignored() -> None:
    tree = parse_cfg(REPO_EXAMPLE.read_text())
    tree["ShareCorrections"]["MonitoringHistory"] = {"Anything": {"TimeSpan": "x"}}
    assert corrections_from_cfg(tree) == EXPECTED_EXAMPLE


def test_update_history_period_is_accepted_and_ignored() -> None:
    text = ONE_INSTANCE.replace("MaxGlobalCorrection = 4", "MaxGlobalCorrection = 4\nUpdateHistoryPeriod = 900")
    assert list(corrections_from_cfg(parse_cfg(text)).instances) == ["GroupsInstance"]


def test_empty_group_means_between_groups() -> None:
    text = ONE_INSTANCE.replace("MaxGlobalCorrection = 4", "Group =")
    assert corrections_from_cfg(parse_cfg(text)).instances["GroupsInstance"].group is None


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "TimeSpan = 604800",
            "TimeSpan = abc",
            "WMSHistory/GroupsInstance/WeekSlice/TimeSpan: 'abc' is not a number",
        ),
        (
            "TimeSpan = 604800",
            "TimeSpan = 1.5",
            "WMSHistory/GroupsInstance/WeekSlice/TimeSpan: '1.5' is not a whole",
        ),
        ("Weight = 80", "Weight = nan", "WMSHistory/GroupsInstance/WeekSlice/Weight: 'nan' is not a number"),
        (
            "Weight = 80",
            "Weight = 0",
            "WMSHistory/GroupsInstance/WeekSlice/Weight: Input should be greater than 0",
        ),
        (
            "MaxCorrection = 2",
            "MaxCorrection = 0.5",
            "WeekSlice/MaxCorrection: Input should be greater than or",
        ),
        (
            "MaxGlobalCorrection = 4",
            "MaxGlobalCorrection = x",
            "WMSHistory/GroupsInstance/MaxGlobalCorrection: 'x'",
        ),
        (
            "MaxCorrection = 2",
            "MaxCorrection = 2\nMaxCorection = 3",
            "WeekSlice/MaxCorection: unknown option",
        ),
        (
            "MaxGlobalCorrection = 4",
            "MaxGlobalCorection = 4",
            "GroupsInstance/MaxGlobalCorection: unknown option",
        ),
        ("Weight = 80", "", "WMSHistory/GroupsInstance/WeekSlice: missing Weight"),
        ("MaxCorrection = 2", "MaxCorrection = 2\nNested {\n}", "WeekSlice/Nested: unexpected section"),
    ],
)
def test_conversion_errors_name_the_path(old: str, new: str, message: str) -> None:
    assert old in ONE_INSTANCE
    with pytest.raises(CfgError) as caught:
        corrections_from_cfg(parse_cfg(ONE_INSTANCE.replace(old, new)))
    assert message in str(caught.value)


def test_instance_without_slices_is_an_error() -> None:
    with pytest.raises(CfgError, match="WMSHistory/Bare: no time slice"):
        corrections_from_cfg({"WMSHistory": {"Bare": {"Group": "g"}}})


def test_option_directly_under_wms_history_is_an_error() -> None:
    with pytest.raises(CfgError, match="WMSHistory: unexpected option"):
        corrections_from_cfg({"WMSHistory": {"Stray": "1"}})


def test_two_instances_for_one_group_is_an_error() -> None:
    text = REPO_EXAMPLE.read_text().replace(
        "      MaxGlobalCorrectionFactor = 3\n      WeekSlice",
        "      Group = lhcb_user\n      MaxGlobalCorrectionFactor = 3\n      WeekSlice",
        1,
    )
    with pytest.raises(CfgError, match="GroupsInstance and lhcb_userInstance both correct group lhcb_user"):
        corrections_from_cfg(parse_cfg(text))


def test_two_share_corrections_sections_is_ambiguous() -> None:
    one = parse_cfg(ONE_INSTANCE)
    with pytest.raises(CfgError, match="more than one ShareCorrections"):
        corrections_from_cfg({"A": one, "B": one})


# ---------------------------------------------------------------------- files


def test_load_errors_name_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.cfg", "ShareCorrections\n{\n  what is this\n}\n")
    with pytest.raises(CfgError) as caught:
        load_corrections(path)
    assert str(caught.value).startswith(f"{path}:3: expected 'key = value'")


def test_load_conversion_error_names_file(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.cfg", ONE_INSTANCE.replace("TimeSpan = 604800", "TimeSpan = abc"))
    with pytest.raises(CfgError, match=r"bad\.cfg: WMSHistory/GroupsInstance/WeekSlice/TimeSpan: 'abc'"):
        load_corrections(path)


def test_toml_fairmatch_shape(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "corrections.toml",
        """
        [instances.GroupsInstance]
        max_global_correction = 3
        [instances.GroupsInstance.slices.WeekSlice]
        time_span = 604800
        weight = 80
        max_correction = 2
        [instances.GroupsInstance.slices.HourSlice]
        TimeSpan = 3600
        Weight = 20
        MaxCorrection = 5

        [instances.lhcb_userInstance]
        Group = "lhcb_user"
        MaxGlobalCorrectionFactor = 3
        slices.WeekSlice = { TimeSpan = 604800, Weight = 80, MaxCorrection = 2 }
        slices.HourSlice = { TimeSpan = 3600, Weight = 20, MaxCorrection = 5 }
        """,
    )
    assert load_corrections(path) == EXPECTED_EXAMPLE


def test_toml_dirac_shape(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "corrections.toml",
        """
        [ShareCorrections]
        ShareCorrectorsToStart = ["WMSHistory"]

        [ShareCorrections.WMSHistory.GroupsInstance]
        MaxGlobalCorrectionFactor = 3
        [ShareCorrections.WMSHistory.GroupsInstance.WeekSlice]
        TimeSpan = 604800
        Weight = 80
        MaxCorrection = 2
        [ShareCorrections.WMSHistory.GroupsInstance.HourSlice]
        TimeSpan = 3600
        Weight = 20
        MaxCorrection = "5"

        [ShareCorrections.WMSHistory.lhcb_userInstance]
        Group = "lhcb_user"
        MaxGlobalCorrection = 3.0
        WeekSlice = { TimeSpan = 604800, Weight = 80, MaxCorrection = 2 }
        HourSlice = { TimeSpan = 3600, Weight = 20, MaxCorrection = 5 }
        """,
    )
    assert load_corrections(path) == EXPECTED_EXAMPLE


def test_toml_dirac_shape_not_started(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "corrections.toml",
        """
        [ShareCorrections]
        ShareCorrectorsToStart = []
        [ShareCorrections.WMSHistory.GroupsInstance.WeekSlice]
        TimeSpan = 604800
        Weight = 80
        MaxCorrection = 2
        """,
    )
    assert load_corrections(path) == CorrectionsConfig()


def test_toml_errors_are_cfg_errors(tmp_path: Path) -> None:
    broken = write(tmp_path, "broken.toml", "[instances\n")
    with pytest.raises(CfgError, match=r"broken.toml"):
        load_corrections(broken)
    invalid = write(tmp_path, "invalid.toml", "[instances.I]\nslices = {}\n")
    with pytest.raises(CfgError, match=r"invalid\.toml: instances/I/slices: Dictionary should have at least 1 item"):
        load_corrections(invalid)
    boolean = write(tmp_path, "bool.toml", "[WMSHistory.I.S]\nTimeSpan = true\nWeight = 1\nMaxCorrection = 2\n")
    with pytest.raises(CfgError, match="WMSHistory/I/S/TimeSpan: True is not a number"):
        load_corrections(boolean)


def test_unknown_extension_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CfgError, match=r"unknown extension '.yaml'"):
        load_corrections(write(tmp_path, "c.yaml", ""))
    with pytest.raises(CfgError, match=r"absent.cfg"):
        load_corrections(tmp_path / "absent.cfg")
