from . import main

main(prog_name="aoti-debug")
