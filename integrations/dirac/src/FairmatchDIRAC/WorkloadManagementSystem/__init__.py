# SPDX-License-Identifier: GPL-3.0-or-later
"""FairmatchDIRAC's part of DIRAC's WorkloadManagementSystem."""
