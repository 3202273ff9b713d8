"""The UI as users use it: headless Chromium on the UI `dagster dev` serves over a fresh
instance; no dialog greets the first visit, a sim target's `baseline` partition is
materialized from its asset page, the page shows the stored throughput and checks, and a
report's plots, embedded in its Markdown metadata, show as images the browser decoded."""

from __future__ import annotations

import time

import dagster as dg
import pytest
from playwright.sync_api import Page, expect

from hyperloom_assets.assets.metadata import with_embedded_plots
from tests.cli.conftest import FAST_SIM_TARGET, instance_at, stored_check_executions, stored_materialization, write_target
from tests.cli.dagster_ui import chromium_page, dagster_dev, screenshot_on_failure
from tests.unit.test_plot_markdown import sweep_plots

pytestmark = pytest.mark.cli

PARTITION = "sim-ui"
BASELINE_CHECKS = ("baseline_converged", "baseline_client_not_saturated")
LOAD_S = 90.0  # the code location loads in a code server of its own after the webserver is up
STEP_S = 30.0  # any later element, once the location is loaded
RUN_S = 120.0  # queued, dequeued by the daemon, a run worker, a step process, a ~3 s measurement
# The UI opens its community dialog one second after it learns the instance wants it.
NUX_DELAY_S = 1.0


def open_first_page(page: Page, url: str) -> bool:
    """Open the asset page on a fresh profile; what the server told the UI about its dialog."""
    with page.expect_response(lambda r: "/graphql?op=ShouldShowNux" in r.url, timeout=LOAD_S * 1000) as asked:
        page.goto(url)
    return asked.value.json()["data"]["shouldShowNux"]


def materialize_partition(page: Page, partition: str) -> str:
    """Materialize…, pick the partition, launch; the launched run's id from the toast's link."""
    page.get_by_role("button", name="Materialize…").click()
    dialog = page.get_by_role("dialog").filter(has_text="Launch runs to materialize baseline")
    dialog.get_by_text("Select a partition or create one").click()
    page.get_by_role("menuitem").filter(has=page.get_by_text(partition, exact=True)).first.click()
    dialog.get_by_text("Launch runs to materialize baseline").click()  # closes the partition picker
    dialog.get_by_role("button", name="Launch 1 run").click()
    link = page.get_by_role("link", name="View", exact=True).first
    href = link.get_attribute("href") or ""
    assert "/runs/" in href, f"the launch toast links to {href!r}, not a run"
    return href.rsplit("/runs/", 1)[1].split("?")[0]


def wait_run_success(page: Page, base: str, run_id: str) -> None:
    page.goto(f"{base}/runs/{run_id}")
    status = page.get_by_text("Success", exact=True).or_(page.get_by_text("Failure", exact=True)).first
    expect(status).to_be_visible(timeout=RUN_S * 1000)
    assert status.inner_text() == "Success", f"run {run_id} did not succeed"


def shown_metadata(page: Page, base: str, key: str) -> str:
    """The value the partition's latest materialization shows for a metadata key."""
    page.goto(f"{base}/assets/baseline?view=partitions&partition={PARTITION}")
    row = page.locator("tr", has=page.get_by_text(key, exact=True)).first
    return row.locator("td").nth(1).inner_text().strip()


def beside(page: Page, label: str):
    """What sits beside a label of the check's latest execution (Evaluation result, Partition)."""
    return page.locator(f'xpath=//span[normalize-space()="{label}"]/following-sibling::*[1]').first


def shown_check(page: Page, base: str, name: str) -> dict:
    """What the asset's Checks tab shows of a check's latest execution."""
    page.goto(f"{base}/assets/baseline?view=checks&checkDetail={name}")
    result = beside(page, "Evaluation result")
    expect(result).to_be_visible(timeout=STEP_S * 1000)
    return {"result": result.inner_text().strip(), "icon": result.get_by_role("img").first.get_attribute("aria-label"),
            "partition": beside(page, "Partition").inner_text().strip(),
            "run_link": page.locator("a[href*='/runs/']").first.get_attribute("href") or ""}


# The Checks tab's tag for a latest execution: its text and icon, by outcome and severity.
TAGS = {(True, dg.AssetCheckSeverity.WARN): ("Passed", "check_circle"),
        (True, dg.AssetCheckSeverity.ERROR): ("Passed", "check_circle"),
        (False, dg.AssetCheckSeverity.WARN): ("Failed", "warning_outline"),
        (False, dg.AssetCheckSeverity.ERROR): ("Failed", "cancel")}


def file_report_with_plots(home, folder) -> list[str]:
    """File a `final_report` materialization whose `report` is the Markdown the asset writes: links to
    its sweep plots, embedded by the asset's own helper. The plots' names, in order."""
    folder.mkdir()
    names = [path.name for path in sweep_plots(folder)]
    markdown = "# Report\n\n" + "\n\n".join(f"![{name}]({name})" for name in names) + "\n"
    event = dg.AssetMaterialization(asset_key="final_report", partition=PARTITION,
                                    metadata={"report": dg.MetadataValue.md(with_embedded_plots(markdown, folder))})
    with instance_at(home) as instance:
        instance.report_runless_asset_event(event)
    return names


def shown_report_images(page: Page, base: str, count: int) -> list[dict]:
    """Open the report's Markdown from the partition's metadata (behind "[Show Markdown]" when it
    is long, inline when short); each image the browser shows in it."""
    page.goto(f"{base}/assets/final_report?view=partitions&partition={PARTITION}")
    row = page.locator("tr", has=page.get_by_text("report", exact=True)).first
    expect(row).to_be_visible(timeout=STEP_S * 1000)
    show = row.get_by_text("[Show Markdown]")
    if show.count():
        show.click()
    images = (page.get_by_role("dialog") if show.count() else row).locator("img")
    expect(images).to_have_count(count, timeout=STEP_S * 1000)
    return images.evaluate_all(
        "imgs => imgs.map(i => ({alt: i.alt, data: i.src.startsWith('data:image/png;base64,'),"
        " complete: i.complete, width: i.naturalWidth}))")


def stored_check(home, name: str) -> dg.AssetCheckEvaluation:
    """The check's latest evaluation filed under the partition."""
    key = dg.AssetCheckKey(dg.AssetKey("baseline"), name)
    record = stored_check_executions(home, [key], PARTITION).get(key)
    assert record is not None and record.event is not None, f"no stored evaluation of {name} for {PARTITION}"
    return record.event.dagster_event.event_specific_data


def test_materialize_a_baseline_from_its_asset_page(tmp_path, home) -> None:
    targets = tmp_path / "targets"
    write_target(targets, PARTITION, FAST_SIM_TARGET)
    started = time.monotonic()
    with dagster_dev(home, targets, tmp_path / "dev") as base, chromium_page(tmp_path / "chromium-profile") as page, \
            screenshot_on_failure(page, tmp_path / "failure.png"):
        page.set_default_timeout(STEP_S * 1000)
        assert open_first_page(page, f"{base}/assets/baseline") is False, "the instance asks for the community dialog"
        expect(page.get_by_role("button", name="Materialize…")).to_be_enabled(timeout=LOAD_S * 1000)
        page.wait_for_timeout(2 * NUX_DELAY_S * 1000)
        expect(page.get_by_role("dialog")).to_have_count(0)  # no onboarding, newsletter or community dialog

        run_id = materialize_partition(page, PARTITION)
        wait_run_success(page, base, run_id)
        stored_run, stored = stored_materialization(home, "baseline", PARTITION)
        assert stored_run == run_id
        throughput = shown_metadata(page, base, "output_throughput")
        assert float(throughput) == stored["output_throughput"]
        for name in BASELINE_CHECKS:
            shown, evaluation = shown_check(page, base, name), stored_check(home, name)
            print(f"{name}: {shown}; stored passed={evaluation.passed} {evaluation.severity} {evaluation.description!r}")
            assert (shown["result"], shown["icon"]) == TAGS[(evaluation.passed, evaluation.severity)], name
            assert shown["partition"] == PARTITION
            assert run_id in shown["run_link"]

        names = file_report_with_plots(home, tmp_path / "report")
        images = shown_report_images(page, base, len(names))
        print(f"report images shown: {images}")
        assert [image["alt"] for image in images] == names, "every plot of the report is an image in the UI"
        assert all(image["data"] and image["complete"] and image["width"] > 0 for image in images), \
            "each image is the embedded PNG, decoded by the browser"
    print(f"UI test: {time.monotonic() - started:.1f} s; output_throughput shown {throughput}")
