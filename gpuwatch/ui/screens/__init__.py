"""Modal screens of the gpuwatch apps, one per module."""

from gpuwatch.ui.screens.confirm import ConfirmScreen
from gpuwatch.ui.screens.help import HelpScreen
from gpuwatch.ui.screens.kill import KillScreen
from gpuwatch.ui.screens.stack import StackScreen
from gpuwatch.ui.screens.summary import SummaryScreen

__all__ = ["ConfirmScreen", "HelpScreen", "KillScreen", "StackScreen", "SummaryScreen"]
