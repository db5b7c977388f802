"""Unit tests of bench/gpu/eval.py's statistics, report and worker protocol, and of trace_gaps.py's analysis (run by ctest:
tests/bench_test/CMakeLists.txt). No GPU, no simulator, no PyTorch needed."""
import json
import os
import random
import shutil
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
import eval_pool as epool      # noqa: E402
import eval_proc as ep          # noqa: E402
import example_common as ec     # noqa: E402
import eval_report as er        # noqa: E402
import eval_scenarios as esc    # noqa: E402
import eval_setups as es        # noqa: E402
import eval_stats as st         # noqa: E402
import eval_workloads as wl     # noqa: E402
import trace_gaps as tg         # noqa: E402


def iv(ratio, lo, hi):
    return {"ratio": ratio, "lo": lo, "hi": hi, "n": 5, "n_base": 5}


class Percentiles(unittest.TestCase):
    def test_numpy_linear_interpolation(self):
        self.assertEqual(st.percentile([1, 2, 3, 4], 50), 2.5)
        self.assertAlmostEqual(st.percentile(list(range(101)), 99), 99.0)
        self.assertIsNone(st.percentile([], 50))
        self.assertEqual(st.median([3, None, 1, 2]), 2)


class WindowRates(unittest.TestCase):
    # A job counting 100 per second, reporting every 0.1 s from t = 10 to t = 12.
    records = [{"t": 10 + i / 10, "gemms": 10 * i} for i in range(21)]

    def test_rate_inside_the_records(self):
        self.assertAlmostEqual(st.rate_in_window(self.records, "gemms", 10.25, 11.75), 100.0)

    def test_interpolates_between_records(self):
        self.assertAlmostEqual(st.counter_at(self.records, "gemms", 10.05), 5.0)
        self.assertAlmostEqual(st.counter_at(self.records, "gemms", 11.0), 100.0)

    def test_window_not_covered_is_none(self):
        self.assertIsNone(st.rate_in_window(self.records, "gemms", 9.9, 11))
        self.assertIsNone(st.rate_in_window(self.records, "gemms", 11, 12.1))
        self.assertIsNone(st.rate_in_window(self.records, "gemms", 11, 11))
        self.assertIsNone(st.rate_in_window(self.records, "iterations", 10.5, 11))

    def test_pause_inside_window_counts_as_no_progress(self):
        paused = [{"t": 0, "n": 0}, {"t": 1, "n": 100}, {"t": 3, "n": 100}, {"t": 4, "n": 200}]
        self.assertAlmostEqual(st.rate_in_window(paused, "n", 0, 4), 50.0)


class Bootstrap(unittest.TestCase):
    def sample(self, seed, n, center, spread):
        rng = random.Random(seed)
        return [center * (1 + rng.uniform(-spread, spread)) for _ in range(n)]

    def test_interval_holds_the_true_ratio_and_is_ordered(self):
        base = self.sample(1, 7, 1000.0, 0.1)
        values = self.sample(2, 7, 2000.0, 0.1)
        r = st.bootstrap_ratio(values, base, seed=3)
        self.assertLessEqual(r["lo"], r["ratio"])
        self.assertLessEqual(r["ratio"], r["hi"])
        self.assertLess(r["lo"], 2.0)
        self.assertGreater(r["hi"], 2.0)
        self.assertAlmostEqual(r["ratio"], st.median(values) / st.median(base))
        self.assertEqual((r["n"], r["n_base"]), (7, 7))

    def test_separated_samples_exclude_one(self):
        r = st.bootstrap_ratio(self.sample(4, 5, 1300.0, 0.05), self.sample(5, 5, 1000.0, 0.05))
        self.assertGreater(r["lo"], 1.0)
        self.assertEqual(st.interval_side(r), "above")

    def test_noise_alone_against_alone_spans_one(self):
        r = st.bootstrap_ratio(self.sample(6, 5, 1000.0, 0.3), self.sample(7, 5, 1000.0, 0.3))
        self.assertEqual(st.interval_side(r), "n.s.")

    def test_fixed_seed_is_deterministic(self):
        base, values = self.sample(8, 5, 10.0, 0.4), self.sample(9, 5, 12.0, 0.4)
        self.assertEqual(st.bootstrap_ratio(values, base, seed=11), st.bootstrap_ratio(values, base, seed=11))
        self.assertNotEqual(st.bootstrap_ratio(values, base, seed=11, resamples=50),
                            st.bootstrap_ratio(values, base, seed=12, resamples=50))

    def test_wider_level_gives_wider_interval(self):
        base, values = self.sample(10, 9, 10.0, 0.3), self.sample(11, 9, 15.0, 0.3)
        narrow = st.bootstrap_ratio(values, base, level=0.5)
        wide = st.bootstrap_ratio(values, base, level=0.95)
        self.assertLessEqual(wide["lo"], narrow["lo"])
        self.assertGreaterEqual(wide["hi"], narrow["hi"])

    def test_no_data(self):
        self.assertIsNone(st.bootstrap_ratio([], [1, 2]))
        self.assertIsNone(st.bootstrap_ratio([1, 2], [None]))
        self.assertIsNone(st.bootstrap_ratio([1, 2], [0, 0, 0]))


class Pareto(unittest.TestCase):
    def test_marks_dominated_and_significance(self):
        rows = {
            # lower p99 and more LP than 'default', intervals apart on p99
            "fikit": {"p99": iv(1.05, 1.00, 1.10), "lp": iv(0.60, 0.55, 0.65)},
            "default": {"p99": iv(1.60, 1.50, 1.70), "lp": iv(0.55, 0.50, 0.62)},
            # beaten by fikit on both medians, but every interval overlaps fikit's
            "mps": {"p99": iv(1.08, 1.01, 1.15), "lp": iv(0.58, 0.52, 0.64)},
            # better LP, worse p99: on the frontier
            "mps-prio": {"p99": iv(1.40, 1.30, 1.50), "lp": iv(0.90, 0.85, 0.95)},
        }
        marks = st.pareto(rows)
        self.assertEqual(marks["fikit"]["dominated_by"], [])
        self.assertEqual(marks["mps-prio"]["dominated_by"], [])
        self.assertIn("fikit", marks["default"]["dominated_by"])
        self.assertIn("fikit", marks["default"]["significant_by"])
        self.assertEqual(marks["mps"]["dominated_by"], ["fikit"])
        self.assertEqual(marks["mps"]["significant_by"], [])

    def test_equal_medians_do_not_dominate(self):
        same = {"p99": iv(1.2, 1.1, 1.3), "lp": iv(0.5, 0.4, 0.6)}
        marks = st.pareto({"a": dict(same), "b": dict(same)})
        self.assertEqual(marks["a"]["dominated_by"], [])
        self.assertEqual(marks["b"]["dominated_by"], [])

    def test_setup_without_a_metric_is_left_out(self):
        marks = st.pareto({"a": {"p99": iv(1, 1, 1), "lp": None}, "b": {"p99": iv(2, 2, 2), "lp": iv(0.1, 0.1, 0.1)}})
        self.assertNotIn("a", marks)
        self.assertEqual(marks["b"]["dominated_by"], [])


def pair_runs(setups, rng):
    """A pair's raw results: HP p99 / LP rate around these medians, 5 repetitions each."""
    runs = {}
    for name, (p99, lp) in setups.items():
        runs[name] = [{"hp": {"p50": p99 * 0.8 * rng.uniform(0.98, 1.02), "p99": p99 * rng.uniform(0.98, 1.02)},
                       "lp_rate": lp * rng.uniform(0.98, 1.02)} for _ in range(5)]
    return {"hp": "resnet50", "lp": "gemm8192", "arrival": "closed", "think_ms": 2, "load": None,
            "requests": 300, "lp_unit": "GEMM/s", "setups": list(setups), "runs": runs}


class PairSummary(unittest.TestCase):
    def setUp(self):
        self.pr = pair_runs({"alone": (1000, 100), "alone-b": (1000, 100), "default": (1600, 80),
                             "mps": (1500, 90), "mps-prio": (1300, 85), "fikit": (1100, 60),
                             "fikit-mps": (1050, 88)}, random.Random(5))
        self.s = er.summarise_pair(self.pr, seed=1)

    def test_ratios_to_alone_and_noise_floor_row(self):
        self.assertNotIn("alone", self.s["rows"])
        self.assertAlmostEqual(self.s["rows"]["alone-b"]["p99"]["ratio"], 1.0, delta=0.05)
        self.assertAlmostEqual(self.s["rows"]["default"]["p99"]["ratio"], 1.6, delta=0.08)
        self.assertAlmostEqual(self.s["rows"]["fikit-mps"]["lp"]["ratio"], 0.88, delta=0.05)
        self.assertEqual(self.s["rows"]["default"]["reps"], 5)

    def test_noise_floor_is_not_a_competitor(self):
        self.assertNotIn("alone-b", self.s["pareto"])

    def test_default_fikit_and_its_comparisons(self):
        # fikit-mps is what a user gets by default (fikit-scheduler --mps on); here it beats default on both
        self.assertEqual(self.s["default_fikit"], "fikit-mps")
        self.assertIn("fikit-mps", self.s["pareto"]["fikit"]["dominated_by"])
        self.assertIn("fikit-mps", self.s["pareto"]["default"]["significant_by"])
        vs = self.s["versus"]["default"]
        self.assertEqual(er.verdict(vs["p99"], lower_is_better=True), "better")
        self.assertEqual(er.verdict(vs["lp"], lower_is_better=False), "better")

    def test_table_marks_rows(self):
        text = er.pair_block("resnet50:gemm8192@closed", dict(self.pr, summary=self.s), {})
        lines = {l.split()[0]: l for l in text.splitlines() if l.strip() and l.split()[0] in self.s["rows"]}
        self.assertIn("noise floor", lines["alone-b"])
        self.assertIn("dominated by", lines["default"])
        self.assertIn("significant: ", lines["default"])
        self.assertTrue(lines["fikit-mps"].rstrip().endswith("-"))
        self.assertIn("FIKIT as set up by default (fikit-mps) vs default", text)

    def test_a_better_variant_is_not_what_a_user_gets(self):
        pr = pair_runs({"alone": (1000, 100), "default": (1600, 80), "fikit": (1100, 60), "loose": (1020, 95),
                        "mps[x]": (900, 99)}, random.Random(5))
        pr["bases"] = {"alone": "alone", "default": "default", "fikit": "fikit", "loose": "fikit", "mps[x]": "mps[x]"}
        s = er.summarise_pair(pr, seed=1)
        self.assertEqual(s["default_fikit"], "fikit")   # "loose" is better, but it is a variant
        self.assertIn("loose", s["pareto"])

    def test_missing_setup_runs_do_not_break_the_table(self):
        self.pr["runs"]["mps"] = []
        s = er.summarise_pair(self.pr, seed=1)
        self.assertIsNone(s["rows"]["mps"]["p99"])
        self.assertNotIn("mps", s["pareto"])
        er.pair_block("x", dict(self.pr, summary=s), {})

    def test_the_hps_own_time_is_a_column_where_the_runs_have_it(self):
        self.assertNotIn("HP own time", er.pair_block("p1", dict(self.pr, summary=self.s), {}))   # closed loop
        rng = random.Random(7)
        for name, own in (("alone", 1500), ("fikit-mps", 1650), ("default", 1800)):
            for r in self.pr["runs"][name]:
                r["hp"]["service_p50"] = own * rng.uniform(0.99, 1.01)
        s = er.summarise_pair(self.pr, seed=1)
        self.assertAlmostEqual(s["rows"]["fikit-mps"]["own"]["ratio"], 1.1, delta=0.03)
        self.assertAlmostEqual(s["rows"]["default"]["own"]["ratio"], 1.2, delta=0.03)
        self.assertNotIn("own", s["rows"]["mps"])   # its runs lack it
        text = er.pair_block("p1", dict(self.pr, summary=s), {})
        self.assertIn("HP own time x alone [95% CI]", text)
        row = next(l for l in text.splitlines() if l.split() and l.split()[0] == "fikit-mps")
        self.assertIn("1.10 [", row)

    def test_status_reading_against_the_clients_p50(self):
        # alone p50 medians ~800 us; fikit-mps ~840 us (1.05x). Status read 1.10x in three windows
        # and 0.95x in two: each window's reading over its own clients' figure.
        for r, reading in zip(self.pr["runs"]["fikit-mps"], (1.10, 1.10, 0.95, 1.10, 0.95)):
            r["status_reading"] = reading
        alone = sorted(r["hp"]["p50"] for r in self.pr["runs"]["alone"])[2]
        expected = sorted(r["status_reading"] / (r["hp"]["p50"] / alone) for r in self.pr["runs"]["fikit-mps"])
        s = er.summarise_pair(self.pr, seed=1)
        got = s["rows"]["fikit-mps"]["status_reading"]
        self.assertAlmostEqual(got["median"], expected[2])
        self.assertEqual((got["lo"], got["hi"], got["n"]), (expected[0], expected[-1], 5))
        self.assertNotIn("status_reading", s["rows"]["default"])   # no FIKIT status there
        text = er.pair_block("p1", dict(self.pr, summary=s), {})
        self.assertIn("status's reading of the HP's requests over its clients' p50 x alone, median (range, windows): "
                      "fikit-mps %.2f (%.2f-%.2f, 5)" % (expected[2], expected[0], expected[-1]), text)

    def test_status_reading_is_the_services_recent_inflation(self):
        status = json.dumps({"tasks": [
            {"key": "job", "priority": 5, "recent_inflation": 0.0, "recent_periods": 0},
            {"key": "svc", "priority": 0, "recent_inflation": 1.34, "recent_periods": 128, "inflation": 1.41}]})
        self.assertEqual(esc.service_reading(status), 1.34)
        self.assertIsNone(esc.service_reading(json.dumps({"tasks": [
            {"key": "svc", "priority": 0, "recent_inflation": 0.0, "recent_periods": 0}]})))   # no baseline yet
        self.assertIsNone(esc.service_reading("status failed: timed out"))

    def test_capped_windows_are_counted(self):
        for r in self.pr["runs"]["default"][:3]:
            r["hp"]["capped"] = True
        text = er.pair_block("p1", dict(self.pr, summary=self.s), {})
        self.assertIn("capped windows (the HP's requests stopped at --window-max-s): default 3 of 5", text)

    def test_mps_client_priorities_as_the_processes_ended_up(self):
        workers = {"a": {"role": "hp", "setup": "mps-prio", "pairs": ["p1"], "env": {"CUDA_MPS_CLIENT_PRIORITY": "0"}},
                   "b": {"role": "lp", "setup": "mps-prio", "pairs": ["p1"], "env": {"CUDA_MPS_CLIENT_PRIORITY": "1"}},
                   "c": {"role": "lp", "setup": "fikit-mps", "pairs": ["p1"], "env": {}},
                   "d": {"role": "hp", "setup": "fikit-mps", "pairs": ["p1"], "env_given": {}}}
        text = er.pair_block("p1", dict(self.pr, summary=self.s), workers)
        self.assertIn("MPS client priority: mps HP ? LP ?; ", text)
        self.assertIn("mps-prio HP 0 LP 1", text)
        self.assertIn("fikit-mps HP ? LP unset", text)

    def test_share_stats_shown_for_the_pair_workers_only(self):
        workers = {"lp-gemm8192-fikit": {"role": "lp", "setup": "fikit", "log": "012-lp", "pairs": ["p1"],
                                         "share_stats": {"reaction_us": {"n": 9, "p50": 3.5}}},
                   "lp-other": {"role": "lp", "setup": "fikit", "log": "013-lp", "pairs": ["p2"],
                                "share_stats": {"reaction_us": {"n": 1}}}}
        text = er.pair_block("p1", dict(self.pr, summary=self.s), workers)
        self.assertIn("reaction_us{n=9,p50=3.5}", text)
        self.assertNotIn("013-lp", text)


class Requests(unittest.TestCase):
    """example_common.run_requests, the request loop of infer.py, with a 2 ms stand-in request."""

    class NoStop:
        stopped = False

    def run_with(self, **kw):
        args = dict(count=40, warmup=2, arrival="closed", think_s=0.001, rate=0.0, load=0.0, seed=1, stop=self.NoStop())
        args.update(kw)
        return ec.run_requests(lambda: time.sleep(0.002), **args)

    def test_closed_loop_latency_is_the_service_time(self):
        r = self.run_with()
        self.assertEqual(r["requests"], 40)
        self.assertEqual(r["jct_us"], r["service_us"])
        self.assertGreaterEqual(r["jct_us"]["p50"], 2000)
        self.assertFalse(r["capped"])
        self.assertGreaterEqual(r["wall_s"], 40 * 0.002 + 39 * 0.001)

    def test_poisson_latency_includes_queueing(self):
        # 300 arrivals a second of 2 ms requests: busy 60 % of the time, so some requests queue.
        r = self.run_with(arrival="poisson", rate=300.0, count=150)
        self.assertEqual(r["rate"], 300.0)
        self.assertGreaterEqual(r["jct_us"]["p50"], r["service_us"]["p50"])
        self.assertGreater(r["jct_us"]["p99"], 1.3 * r["service_us"]["p99"])
        self.assertGreater(r["wall_s"], 0.3)      # 150 arrivals at 300/s: ~0.5 s

    def test_load_sizes_the_rate_from_the_warm_up(self):
        r = self.run_with(arrival="poisson", load=0.5, warmup=5, count=5)
        self.assertTrue(100 < r["rate"] < 260, r["rate"])     # 0.5 / ~2.1 ms

    def test_max_s_caps_the_window(self):
        r = self.run_with(count=10000, max_s=0.1)
        self.assertTrue(r["capped"])
        self.assertLess(r["requests"], 10000)
        self.assertLess(r["wall_s"], 0.2)


class Scenarios(unittest.TestCase):
    def test_idle_hp_setup_once_per_variant_each_with_its_daemon(self):
        known = {"plain": es.Setup("plain", alone=True)}
        got = esc.lpo_setups(["plain", "share+idle-hp"], known,
                             [("", []), ("[idle-grace=0]", ["--idle-grace", "0"])])
        self.assertEqual([s.name for s in got], ["plain", "share+idle-hp", "share+idle-hp[idle-grace=0]"])
        self.assertEqual([s.scheduler for s in got[1:]], ["lpo-idle", "lpo-idle[idle-grace=0]"])
        self.assertEqual(got[2].flags, ["--idle-grace", "0"])
        self.assertEqual([s.idle_hp for s in got], [False, True, True])   # the idle HP runs beside these
        self.assertEqual([s.base for s in got], ["plain", "share+idle-hp", "share+idle-hp"])

    def test_a_variant_is_judged_by_its_base_setups_target(self):
        rng = random.Random(3)
        setups = ["plain", "share+idle-hp", "share+idle-hp[idle-grace=0]", "loose", "share[x]"]
        entry = {"window_s": 3, "lp_unit": "it/s", "setups": setups,
                 "bases": {"plain": "plain", "share+idle-hp": "share+idle-hp",
                           "share+idle-hp[idle-grace=0]": "share+idle-hp", "loose": "share+idle-hp",
                           "share[x]": "share[x]"},
                 "runs": {s: [{"rate": 100 * f * rng.uniform(0.99, 1.01)} for _ in range(5)]
                          for s, f in zip(setups, (1.0, 0.97, 0.80, 0.97, 0.97))}}
        entry["summary"] = er.summarise_ratios(entry, "plain", {"rate": ("rate",)}, seed=1)
        rows = {l.split()[0]: l for l in er.lpo_block("lp", entry, {}).splitlines() if l.split() and l.split()[0] in setups}
        self.assertIn(">= 95 %: met", rows["share+idle-hp"])
        self.assertIn(">= 95 %: missed", rows["share+idle-hp[idle-grace=0]"])
        self.assertIn(">= 95 %: met", rows["loose"])   # the base recorded, not the label's spelling
        self.assertNotIn(">=", rows["share[x]"])       # a setup of its own: no target

    def test_measure_variants_set_sample_and_burst(self):
        s = esc.measure_variant("measure/32x4")
        self.assertEqual((s.hook, s.env), ("measure", {"FIKIT_MEASURE_SAMPLE": "32", "FIKIT_MEASURE_BURST": "4"}))
        self.assertEqual(esc.measure_variant("measure/32").env["FIKIT_MEASURE_BURST"], "1")
        self.assertNotEqual(s.task_key(wl.HP("resnet50", {})), esc.measure_variant("measure/32").task_key(
            wl.HP("resnet50", {})))   # each variant measures into a profile of its own
        for bad in ("measure/0", "measure/8x", "measure/x2", "measure/8x0", "measure8"):
            with self.assertRaises(ValueError):
                esc.measure_variant(bad)

    def test_rotation_visits_every_setup_once_per_rep(self):
        items = ["a", "b", "c"]
        self.assertEqual(esc.rotated(items, 0), ["a", "b", "c"])
        self.assertEqual(esc.rotated(items, 1), ["b", "c", "a"])
        self.assertEqual(esc.rotated(items, 4), ["b", "c", "a"])

    def test_parse_pair(self):
        self.assertEqual(wl.parse_pair("resnet50:gemm8192", "closed"), ("resnet50", "gemm8192", "closed"))
        self.assertEqual(wl.parse_pair("resnet50-graph:gemm2048@poisson", "closed"),
                         ("resnet50-graph", "gemm2048", "poisson"))
        self.assertEqual(wl.parse_pair("synthetic@poisson", "closed"), ("synthetic", "synthetic-train", "poisson"))
        for bad in ("resnet50", "resnet50:nope", "nope:gemm8192", "resnet50:gemm8192@open"):
            with self.assertRaises(ValueError):
                wl.parse_pair(bad, "closed")

    def test_pair_setups(self):
        setups = es.pair_setups(list(es.PAIR_SETUPS), [("", []), ("[min-gap=10us]", ["--min-gap", "10us"])], True)
        names = [s.name for s in setups]
        self.assertEqual(names, ["alone", "alone-b", "default", "mps", "mps-prio", "mps-pct", "fikit",
                                 "fikit[min-gap=10us]", "fikit-mps", "fikit-mps[min-gap=10us]"])
        by = {s.name: s for s in setups}
        self.assertTrue(by["mps-prio"].client_prio and by["mps-prio"].mps)
        # mps-pct: the LP alone is held to a share of the SMs' threads.
        self.assertTrue(by["mps-pct"].client_prio and by["mps-pct"].mps)
        self.assertEqual(by["mps-pct"].lp_env, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": es.MPS_PCT_LP})
        self.assertEqual(by["mps-prio"].lp_env, {})
        # On a GPU fikit-run sets the client priority of fikit-mps; the simulator needs it from us.
        self.assertFalse(by["fikit-mps"].client_prio)
        self.assertTrue(es.pair_setups(["fikit-mps"], [("", [])], False)[0].client_prio)
        self.assertEqual(by["fikit[min-gap=10us]"].flags, ["--min-gap", "10us"])
        self.assertNotIn("FIKIT_BACKEND", by["fikit-mps"].env)
        with self.assertRaises(ValueError):
            es.pair_setups(["alone", "nope"], [("", [])], True)

    def test_mps_client_setup_makes_the_service_an_mps_client(self):
        # Only by name; the default setup with fikit-run's backend forced to MPS for both programs.
        self.assertNotIn("fikit-mps-client", es.PAIR_SETUPS)
        client = es.pair_setups(["fikit-mps-client"], [("", []), ("[regime=hold]", ["--regime", "hold"])], True)
        self.assertEqual([s.name for s in client], ["fikit-mps-client", "fikit-mps-client[regime=hold]"])
        for s in client:
            self.assertTrue(s.mps and s.hook == "share")
            self.assertEqual(s.env, {"FIKIT_BACKEND": "mps"})
            self.assertEqual(s.base, "fikit-mps-client")
        self.assertEqual(client[1].flags, ["--regime", "hold"])

    def test_a_service_outside_mps_is_a_choice_unless_its_setup_asked_for_mps(self):
        class Harness:
            def __init__(self):
                self.results, self.logged, self.warned = {"workers": {}}, [], []

            def log(self, text):
                self.logged.append(text)

            def warn(self, text):
                self.warned.append(text)

        class Mps:
            running = True

            def clients(self):
                return set()          # this process is no MPS client

        class Program:
            name = "svc"

        class Proc:
            pid, name = os.getpid(), "svc"

        for setup_name, warns in (("fikit-mps", False), ("fikit-mps-client", True)):
            h = Harness()
            setup = es.pair_setups([setup_name], [("", [])], True)[0]
            spec = epool.Spec("hp", Program(), setup)
            h.results["workers"][spec.name] = {}
            epool.Pool(h, None, Mps()).check_mps_client(Proc(), spec)
            entry = h.results["workers"][spec.name]
            self.assertFalse(entry["mps_client"])
            self.assertEqual(bool(h.warned), warns, (setup_name, h.warned, h.logged))
            self.assertEqual(entry.get("outside_mps_by_fikit_run", False), not warns)

    @unittest.skipUnless(es.shutil.which("taskset"), "taskset not installed")
    def test_pinning(self):
        p = es.Pinning("0-1:2,3:4-6")
        self.assertEqual(p.sets, {"daemon": "0,1", "hp": "2,3", "lp": "4,5,6"})
        self.assertEqual(p.wrap("hp", ["x"]), ["taskset", "-c", "2,3", "x"])
        for bad in ("0-1:1-2:3", "0:1", "a:b:c"):
            with self.assertRaises(ValueError):
                es.Pinning(bad)
        self.assertEqual(es.Pinning("none").wrap("hp", ["x"]), ["x"])


FAKE_JOB = r'''
import sys, time
sys.path.insert(0, %r)
from example_common import Progress, StopFlag, serve
done = {"steps": 0}
def step():
    time.sleep(0.002)
    done["steps"] += 1
def run(n, options):
    t0 = time.monotonic()
    time.sleep(0.001 * n)
    return {"requests": n, "t0": t0, "t1": time.monotonic(), "echo": options}
serve(StopFlag(), Progress(5), lambda: dict(done), step=step, run=run)
'''


class ServeProtocol(unittest.TestCase):
    """eval_proc.Served against examples/pytorch/example_common.serve, with a job that sleeps."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bench-test-")
        script = os.path.join(self.dir, "job.py")
        with open(script, "w") as f:
            f.write(FAKE_JOB % os.path.join(ROOT, "examples", "pytorch"))
        self.p = ep.Served("job", [sys.executable, script], self.dir)
        self.p.wait_event("ready", 20)

    def tearDown(self):
        self.p.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_run_go_pause_quit(self):
        r = self.p.command("run 20 arrival=poisson seed=3", "run", 10)
        self.assertEqual(r["requests"], 20)
        self.assertEqual(r["echo"], {"arrival": "poisson", "seed": "3"})
        going = self.p.command("go", "going", 10)
        time.sleep(0.2)
        paused = self.p.command("pause", "paused", 10)
        self.assertGreater(paused["steps"], going["steps"] + 10)
        # Paused means no step runs: the counter and the progress records stand still.
        n_records = len(self.p.progress())
        time.sleep(0.1)
        self.assertEqual(len(self.p.progress()), n_records)
        self.assertEqual(self.p.command("pause", "paused", 10)["steps"], paused["steps"])
        rate = st.rate_in_window(self.p.progress(), "steps", going["t"] + 0.05, paused["t"] - 0.05)
        self.assertTrue(100 < rate < 600, rate)
        self.assertEqual(self.p.quit(10), 0)

    def test_errors_are_answered(self):
        with self.assertRaises(ep.ChildError):
            self.p.command("jump", "paused", 10)
        with self.assertRaises(ep.ChildError):
            self.p.command("run x", "run", 10)
        self.assertEqual(self.p.command("pause", "paused", 10)["steps"], 0)

    def test_sigterm_while_idle_exits(self):
        self.assertEqual(self.p.stop(grace_s=5), 0)


class TraceGaps(unittest.TestCase):
    """bench/gpu/trace_gaps.py: each idle gap of the GPU goes to the cause its launch call shows."""

    @staticmethod
    def op(ts, dur, corr, name="k"):
        return {"ph": "X", "cat": "kernel", "ts": ts, "dur": dur, "name": name, "args": {"correlation": corr}}

    @staticmethod
    def call(ts, dur, corr, name="cudaLaunchKernel"):
        return {"ph": "X", "cat": "cuda_runtime", "ts": ts, "dur": dur, "name": name, "args": {"correlation": corr}}

    def test_each_gap_by_its_cause(self):
        events = [self.op(0, 10, 1), self.call(0, 1, 1),
                  # launched at 15, after the GPU ran dry at 10: CPU late (gap 10 us)
                  self.call(15, 2, 2), self.op(20, 10, 2),
                  # call from 25 to 100 (held inside it), op at 105: in the launch (gap 75 us)
                  self.call(25, 75, 3), self.op(105, 10, 3),
                  # launched at 110, long before 115, started at 125: GPU late (gap 10 us)
                  self.call(110, 1, 4), self.op(125, 10, 4),
                  # a synchronize ending at 140, the next iteration's op at 150: the boundary (gap 15 us)
                  self.call(100, 40, 99, "cudaDeviceSynchronize"), self.call(141, 1, 5), self.op(150, 10, 5),
                  # 1 us apart: not a gap
                  self.call(151, 1, 6), self.op(161, 10, 6)]
        r = tg.analyse(events, iters=1)
        self.assertEqual(r["gaps_it"], {"sync": 1, "cpu_late": 1, "in_launch": 1, "gpu_late": 1})
        self.assertEqual(r["gap_ms_it"], {"sync": 0.015, "cpu_late": 0.01, "in_launch": 0.075, "gpu_late": 0.01})
        self.assertEqual(r["busy_ms_it"], 0.06)
        self.assertEqual(r["top"][0][:2], [75.0, "in_launch"])
        self.assertEqual(r["hist"]["in_launch"], {"<200": [1, 75.0]})




class PairLoad(unittest.TestCase):
    def test_a_pair_may_name_its_own_poisson_load(self):
        self.assertEqual(wl.pair_load("resnet50-graph:gemm8192@poisson=0.05", 0.35), 0.05)
        self.assertEqual(wl.pair_load("resnet50-graph:gemm8192@poisson", 0.35), 0.35)
        self.assertEqual(wl.parse_pair("resnet50-graph:gemm8192@poisson=0.05", "closed"),
                         ("resnet50-graph", "gemm8192", "poisson"))
        for bad in ("resnet50:gemm8192@poisson=0", "resnet50:gemm8192@poisson=1.5", "resnet50:gemm8192@poisson=x"):
            with self.assertRaises(ValueError):
                wl.pair_load(bad, 0.35)
        with self.assertRaises(ValueError):
            wl.parse_pair("resnet50:gemm8192@closed=0.4", "closed")

    def test_a_load_that_changes_names_its_phases(self):
        self.assertEqual(wl.pair_loads("lm-graph2:vit-l-train@poisson=0.05/0.4/0.05", 0.35), [0.05, 0.4, 0.05])
        self.assertEqual(wl.pair_load("lm-graph2:vit-l-train@poisson=0.05/0.4/0.05", 0.35), 0.05)
        self.assertEqual(wl.pair_loads("lm-graph2:vit-l-train@closed", 0.35), [0.35])
        for bad in ("lm-graph2:vit-l-train@poisson=0.05/", "lm-graph2:vit-l-train@poisson=0.05/2"):
            with self.assertRaises(ValueError):
                wl.pair_loads(bad, 0.35)


if __name__ == "__main__":
    unittest.main()
