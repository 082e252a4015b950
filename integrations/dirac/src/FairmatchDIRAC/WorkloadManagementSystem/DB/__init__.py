# SPDX-License-Identifier: GPL-3.0-or-later
"""The TaskQueueDB kept in fairmatch."""
