"""The schedule diagnosis's rules one at a time: FlashMLA's partitions and deal at their boundaries (a one-block
split, a one-token block, no fixed cost), TileLang's tiles with and without the piece cost, and the diagnosis of
a case from its own shape (dtype, query tokens, heads), including the text when TileLang's kernel refuses it."""

import pytest

from mlagate import config
from mlagate.decide import schedule as s
from mlagate.kernels import mla_decode as m
from mlagate.kernels import tuned


def test_flash_mla_partitions_at_one_query_token_by_default():
    assert s.flash_mla_sm_parts(132, 128) == 66 and s.flash_mla_sm_parts(132, 64) == 132


def test_flash_mla_partitions_divide_the_sms_over_kv_heads():
    assert s.flash_mla_sm_parts(132, 128, 1, kv_heads=2) == 66  # 66 SMs per KV head, 64 query rows each


def test_flash_mla_splits_a_sequence_where_a_single_block_fits():
    # blocks [1, 2]: payload ceil((6 + 7) / 2) + 5 = 12; after sequence 0 the room is 6: 1 block of sequence 1
    assert s.flash_mla_schedule([64, 128], 2) == [((0, 0, 1), (1, 0, 1)), ((1, 1, 2),)]


def test_flash_mla_replay_takes_one_token_blocks_and_no_fixed_cost():
    # blocks of one token: an empty sequence still counts one; payload ceil(4 / 1) + 0 = 4
    assert s.flash_mla_schedule([0, 1, 2], 1, block=1, overhead=0) == [((0, 0, 1), (1, 0, 1), (2, 0, 2))]
    assert s.flash_mla_schedule([3, 3], 2, block=1, overhead=0) == [((0, 0, 3),), ((1, 0, 3),)]


@pytest.mark.parametrize("parts, block, overhead", [(0, 64, 5), (4, 0, 5), (4, 64, -1)])
def test_flash_mla_replay_refuses_a_bad_partition_block_or_cost(parts, block, overhead):
    with pytest.raises(ValueError) as e:
        s.flash_mla_schedule([64], parts, block=block, overhead=overhead)
    assert str(e.value) == (f"num_sm_parts and block must be >= 1 and overhead >= 0, got {parts}, {block}, "
                            f"{overhead}")


def test_tilelang_balance_counts_the_piece_cost_in_loads_and_not_in_tiles():
    # tiles of 64 tokens [2, 1, 5], piece cost 4 (256 tokens): share ceil((8 + 12) / 2) + 4 = 14; partition 0
    # takes sequences 0 and 1 (2 + 4 + 1 + 4 = 11), partition 1 sequence 2 (5 + 4 = 9)
    assert s.tilelang_balance([128, 64, 300], 64, 2) == s.Balance("TileLang", 64, (11, 9), (3, 5))


def case_of(impl, platform, **point):
    cfg = config.load()
    return next(c for c in cfg.cases("full", [impl], platform)
                if c.paged and all(str(getattr(c, k)).partition("@")[0] == str(v) for k, v in point.items()))


def test_a_case_of_two_query_tokens_at_128_heads_halves_both_schedulers_partitions():
    case = case_of("tilelang-seesaw", "cuda", heads=128, q_len=2, batch=64, dtype="float16")
    d = s.diagnose(case, "sm_90a")
    assert (d.tilelang.parts, d.tilelang.block, d.vendor.parts, d.why) == (33, 128, 33, "")
    assert d.vendor == s.flash_mla_balance(case.lengths, 33)


def test_an_arch_named_with_target_features_diagnoses_as_its_base():
    case = case_of("tilelang-seesaw", "cuda", heads=128, q_len=1, batch=64, dtype="float16")
    assert s.diagnose(case, "sm_90a:feature") == s.diagnose(case, "sm_90a")
    assert s.diagnose(case, "sm_90a").vendor.parts == 66


def test_tilelang_plans_with_the_tuned_config_of_the_cases_own_query_dtype(tmp_path, monkeypatch):
    """A tuned entry for the bf16 mean shape (block_N 32) decides the tiles of a bf16 workload case (on cuda, the
    bf16 query reads an fp8 cache)."""
    monkeypatch.setattr(tuned, "TABLE_DIR", tmp_path)
    tuned.write_table("sm_90a", "hopper", [tuned.Entry(m.Shape(64, 4096, 16, "bfloat16"), m.HOPPER.with_(block_N=32),
                                                       {})])
    case = case_of("tilelang-hopper", "cuda", heads=16, q_len=1, batch=64, dtype="bfloat16", workload="ragged-4k")
    assert s.diagnose(case, "sm_90a").tilelang.block == 32
    fp16 = case_of("tilelang-hopper", "cuda", heads=16, q_len=1, batch=64, dtype="float16", workload="ragged-4k")
    assert s.diagnose(fp16, "sm_90a").tilelang.block == 64  # no entry: the family default


def test_a_case_tilelangs_kernel_refuses_here_says_why_in_its_text():
    case = case_of("tilelang-seesaw", "rocm", heads=16, q_len=1, batch=64)
    d = s.diagnose(case, "gfx942")
    why = "config seesaw: the seesaw schedule needs Hopper (wgmma, TMA), not gfx942"
    assert d == s.Diagnosis(None, None, why)
    assert d.text() == f"TileLang: not planned ({why})"


def test_the_vendors_balance_leads_the_text_when_tilelang_is_not_planned():
    vendor = s.flash_mla_balance([640, 1, 130], 4)  # makespan 13 x 4 / 34
    assert s.Diagnosis(None, vendor, "no").text() == ("FlashMLA: longest partition 1.53x the mean; "
                                                      "TileLang: not planned (no)")
    assert s.Diagnosis(None, vendor).text() == "FlashMLA: longest partition 1.53x the mean"
