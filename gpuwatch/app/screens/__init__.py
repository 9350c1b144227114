"""Modal screens of the gpuwatch apps, one per module."""

from gpuwatch.app.screens.help import HelpScreen
from gpuwatch.app.screens.kill import KillScreen
from gpuwatch.app.screens.stack import StackScreen

__all__ = ["HelpScreen", "KillScreen", "StackScreen"]
