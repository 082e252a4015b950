"""`fairmatch sprio` and `fairmatch sshare`: why task queues have their priorities, shares and usage."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from fairmatch.cli.client import TokenOption, UrlOption, call_api, connect
from fairmatch.cli.render import new_table, show
from fairmatch.priority.origin import origin_columns, origin_headers

app = typer.Typer()


@app.command()
def sprio(
    task_queue: Annotated[int | None, typer.Option("--tq", help="Only this task queue.")] = None,
    jobs: Annotated[int, typer.Option(min=0, max=10_000, help="Waiting jobs to list.")] = 0,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Why each task queue has its priority: the policy's terms or factors (like Slurm's sprio)."""
    query = f"?jobs_limit={jobs}" + (f"&task_queue_id={task_queue}" if task_queue else "")
    show(call_api(connect(url, token), "GET", f"/priorities{query}"), sprio_table)


def sprio_table(document: dict) -> Table:
    policy = document["policy"]
    table = new_table(f"Priorities ({policy}, lottery {document['lottery']})",
                      "TQ", "OWNER", "GROUP", "ACCOUNT", "CLASS", "PRIORITY", *origin_headers(policy))  # fmt: skip
    for tq in document["task_queues"]:
        # a run recorded before queues had an account shows its owner group, which it was then
        account = tq.get("account") or tq["owner_group"]
        table.add_row(str(tq["task_queue_id"]), tq["owner"], tq["owner_group"], account, str(tq["priority_class"]),
                      f"{tq['priority']:.6g}", *origin_columns(policy, tq["origin"]))  # fmt: skip
    return table


@app.command()
def sshare(
    associations: Annotated[
        bool, typer.Option("--associations", "-a", help="Every association's shares and usage (sshare -a).")
    ] = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Shares, usage and fair-share factors of the last priority run (like Slurm's sshare).

    With --associations: the association tree's shares, usage and factors, whatever the policy.
    """
    if associations:
        show(call_api(connect(url, token), "GET", "/associations/usage"), association_usage_table)
        return
    show(call_api(connect(url, token), "GET", "/shares"), sshare_table)


def association_usage_table(document: dict) -> Table:
    table = new_table("Associations", "Account", "User", "Parent", "RawShares", "NormShares", "RawUsage",
                      "EffectvUsage", "FairShare")  # fmt: skip
    for row in document["associations"]:
        table.add_row(row["account"], row["user"] or "", row["parent"] or "", str(row["shares"]),
                      *(f"{row[k]:.6f}" if row[k] is not None else "-" for k in
                        ("norm_shares", "raw_usage", "effective_usage", "fairshare")))  # fmt: skip
    return table


def sshare_table(document: dict) -> Table:
    if document.get("associations"):
        table = new_table("Associations", "Account", "User", "RawShares", "NormShares", "RawUsage",
                          "NormUsage", "EffectvUsage", "FairShare")  # fmt: skip
        for node in document["associations"]:
            indent = "  " * max(node["depth"] - 1, 0)  # sshare shows the tree by indentation
            table.add_row(
                indent + node["account"],
                node["user"],
                str(node["raw_shares"]),
                *(
                    f"{node[k]:.6f}" if node[k] is not None else "-"
                    for k in ("norm_shares", "raw_usage", "norm_usage", "effective_usage", "fairshare")
                ),
            )
        return table  # fmt: skip
    if document["policy"] == "dirac":
        # an empty run (nothing waiting, or the first run ever) still answers with the entities
        caption = None if document.get("entities") else "No entities: no job was waiting at the last priority run."
        table = new_table("Entities", "Group", "Owner", "Configured", "GroupCorr", "UserCorr", "Share", "NormShare",
                          caption=caption)  # fmt: skip
        for e in document["entities"]:
            table.add_row(e["group"], e["owner"] or "(all)", f"{e['configured_share']:.6g}",
                          f"{e['group_correction']:.3g}", f"{e['user_correction']:.3g}",
                          f"{e['share']:.6g}", f"{e['normalised_share']:.4f}")  # fmt: skip
        return table
    return sprio_table({"policy": document["policy"], "lottery": "-", "task_queues": [
        {**tq, "origin": tq.get("origin")} for tq in document.get("task_queue_priorities", [])
    ]})  # fmt: skip
