"""The schedule diagnosis (mlagate/decide/schedule.py): FlashMLA's deal replayed on hand-computed batches, and
the balance of TileLang's and FlashMLA's plans on perf.yml's workloads."""

import pytest

from mlagate import config
from mlagate.case import Case
from mlagate.decide import schedule as s


def test_flash_mla_deals_a_hand_computed_batch_across_sequences():
    # blocks of 64 tokens: [10, 1, 3]; total (10+5) + (1+5) + (3+5) = 29; payload ceil(29 / 4) + 5 = 13
    parts = s.flash_mla_schedule([640, 1, 130], 4)
    assert parts == [((0, 0, 8),),  # 10 blocks + 5 do not fit 13: 13 - 5 = 8 blocks of sequence 0
                     ((0, 8, 10), (1, 0, 1)),  # its rest (2 + 5), then sequence 1 whole (1 + 5): room 0
                     ((2, 0, 3),),
                     ()]  # the last partition is left empty
    b = s.flash_mla_balance([640, 1, 130], 4)
    assert b.loads == (13, 13, 8, 0) and b.tiles == (8, 3, 3, 0) and b.idle == 1
    assert b.makespan_ratio == pytest.approx(13 * 4 / 34) and b.tile_ratio == pytest.approx(8 * 4 / 14)


def test_flash_mla_splits_nothing_where_a_partition_has_room_for_the_fixed_cost_only():
    # blocks [4, 4]: payload ceil(18 / 2) + 5 = 14; after sequence 0 (9) the room is 5, no block's worth
    assert s.flash_mla_schedule([256, 256], 2) == [((0, 0, 4),), ((1, 0, 4),)]
    # an empty sequence counts one block, as FlashMLA's last_token_idx = max(s_k - 1, 0) makes it
    assert s.flash_mla_schedule([0, 65], 1) == [((0, 0, 1), (1, 0, 2))]


def test_flash_mla_partitions_follow_its_num_sm_parts_rule():
    # 132 SMs over ceil(s_q x heads / 64) query blocks: the (66, 8) metadata the H200 run saw at 128 heads
    assert [s.flash_mla_sm_parts(132, h, q) for h, q in ((128, 1), (16, 1), (128, 2), (64, 2), (16, 4))] == \
        [66, 132, 33, 66, 132]
    assert s.flash_mla_sm_parts(1, 128) == 1


@pytest.mark.parametrize("bad", [dict(lengths=[], num_sm_parts=4), dict(lengths=[64], num_sm_parts=0),
                                 dict(lengths=[-1], num_sm_parts=4)])
def test_flash_mla_replay_refuses_bad_input_naming_it(bad):
    with pytest.raises(ValueError, match="lengths|num_sm_parts"):
        s.flash_mla_schedule(**bad)


def test_every_workload_block_is_dealt_once_and_no_partition_passes_flash_mlas_payload():
    cfg = config.load()
    for w in cfg.workloads.values():
        for batch in w.batch:
            lengths = w.lengths(batch)
            blocks = [-(-n // 64) for n in lengths]
            payload = -(-sum(b + 5 for b in blocks) // 132) + 5
            dealt = {}
            for part in s.flash_mla_schedule(lengths, 132):
                assert sum(end - first + 5 for _, first, end in part) <= payload
                for seq, first, end in part:
                    dealt.setdefault(seq, []).append((first, end))
            for seq, ranges in dealt.items():  # contiguous pieces in order, covering the sequence
                assert [r[0] for r in ranges] == [0] + [r[1] for r in ranges[:-1]] and ranges[-1][1] == blocks[seq]
            assert sorted(dealt) == list(range(batch))


def test_a_workload_case_diagnoses_both_plans_and_a_dense_one_none():
    cfg = config.load()
    w = cfg.workloads["few-long-2k"]
    case = cfg.case(Case("tilelang-seesaw", 64, w.mean, "float16", 16, 1, "float16", w.tag(64)).key, "cuda")
    d = s.diagnose(case, "sm_90a")
    # the seesaw over pages deals pairs of 64-token tiles
    assert (d.tilelang.parts, d.tilelang.block, d.vendor.parts, d.vendor.block) == (132, 128, 132, 64)
    # the replay's own deal of these lengths, and the text the report shows
    assert d.vendor == s.flash_mla_balance(case.lengths, 132)
    assert d.tilelang == s.tilelang_balance(case.lengths, 128, 132)
    assert d.text() == (f"TileLang: longest partition {d.tilelang.makespan_ratio:.2f}x the mean; "
                        f"FlashMLA: {d.vendor.makespan_ratio:.2f}x")
    # a pair of tiles is the seesaw's grain: coarser than FlashMLA's 64-token blocks
    assert 1.1 < d.tilelang.makespan_ratio < 1.2 and 1.0 < d.vendor.makespan_ratio < 1.1
    vendor_case = Case("flash_mla", 64, w.mean, "float16", 16, 1, "float16", w.tag(64), page_size=64,
                       lengths=case.lengths)
    assert s.diagnose(vendor_case, "sm_90a").tilelang is None
    assert s.diagnose(Case("tilelang-seesaw", 64, 4096, "float16"), "sm_90a") is None
    assert s.diagnose(case, "gfx942").vendor is None  # aiter's is not FlashMLA's


def test_diagnose_cases_keys_tilelang_workload_cases_and_says_when_the_arch_is_unknown():
    cfg = config.load()
    cases = [c for c in cfg.cases("quick", ["tilelang-seesaw", "flash_mla"], "cuda") if c.batch == 64]
    got = s.diagnose_cases(cases, "sm_90a")
    assert set(got) == {c.key for c in cases if c.paged and c.impl == "tilelang-seesaw"} and got
    assert s.diagnose_cases(cases, None) is None  # not known, never an empty (silent) section
    assert s.diagnose_cases([c for c in cases if not c.paged], None) == {}


def test_gate_md_and_the_comparison_page_show_each_workload_cases_balance(tmp_path):
    import gate_fixtures as fx
    from mlagate.report import schedules
    from mlagate.report.comparison import Sides, write_page
    from mlagate.report.review import Review
    from mlagate.report.text import gate_markdown

    cfg = config.load()
    w = cfg.workloads["ragged-4k"]
    case = cfg.case(Case("tilelang-seesaw", 128, w.mean, "float16", 16, 1, "float16", w.tag(64)).key, "cuda")
    d = s.diagnose(case, "sm_90a")
    verdict = fx.evaluate(fx.copy_store(tmp_path))
    md = gate_markdown(verdict, review=Review(schedules={case.key: d}))
    line = f"- {case.label()}: TileLang: longest partition {d.tilelang.makespan_ratio:.2f}x the mean; FlashMLA: "
    assert "### Schedule balance (workload cases)" in md and line in md
    assert schedules.lines({case.key: d}) == [line.removeprefix("- ") + f"{d.vendor.makespan_ratio:.2f}x"]
    assert schedules.UNKNOWN in gate_markdown(verdict, review=Review(schedules=None))
    assert "Schedule balance" not in gate_markdown(verdict, review=Review(schedules={}))
    class NoResults:  # neither side's samples: the page still has its schedule section
        def entries(self, bench):
            return {}

    page = write_page(tmp_path, verdict, Sides("m", NoResults(), NoResults(), None, None), cfg,
                      schedules={case.key: d})
    html = page.read_text()
    assert "Schedule balance of the workload cases" in html
    assert f"<td>{d.tilelang.makespan_ratio:.2f}x</td><td>{d.tilelang.tile_ratio:.2f}x</td>" in html
    assert f"<td>{d.vendor.makespan_ratio:.2f}x</td>" in html
