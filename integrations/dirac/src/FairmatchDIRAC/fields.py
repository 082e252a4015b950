# SPDX-License-Identifier: GPL-3.0-or-later
"""How DIRAC's task-queue definitions name the multi-valued requirements, and fairmatch's names for them."""

# DIRAC's requirement field -> fairmatch's job (and task queue) field
LIST_FIELDS = {
    "Sites": "sites",
    "BannedSites": "banned_sites",
    "GridCEs": "grid_ces",
    "Platforms": "platforms",
    "JobTypes": "job_types",
    "Tags": "tags",
}
