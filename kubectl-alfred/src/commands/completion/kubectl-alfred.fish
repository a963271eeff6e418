# fish completion for kubectl-alfred. Load it with: kubectl-alfred completion fish | source
function __kubectl_alfred_complete
    set -l out (kubectl-alfred __complete (commandline -opc)[2..-1] (commandline -ct) 2>/dev/null)
    or return
    set -l directive (string replace ':' '' -- $out[-1])
    set -l candidates $out[1..-2]
    if test (count $candidates) -eq 0; and test (math "bitand($directive, 4)") -eq 0
        __fish_complete_path (commandline -ct)
        return
    end
    printf '%s\n' $candidates
end
complete -c kubectl-alfred -f -a '(__kubectl_alfred_complete)'
