"""Modal screens of the gpuwatch apps, one per module."""

from gpuwatch.app.screens.confirm import ConfirmScreen
from gpuwatch.app.screens.help import HelpScreen
from gpuwatch.app.screens.kill import KillScreen
from gpuwatch.app.screens.stack import StackScreen
from gpuwatch.app.screens.summary import SummaryScreen

__all__ = ["ConfirmScreen", "HelpScreen", "KillScreen", "StackScreen", "SummaryScreen"]
