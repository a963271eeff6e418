# bash completion for kubectl-alfred. Load it with: source <(kubectl-alfred completion bash)
_kubectl_alfred() {
    local cur="${COMP_WORDS[COMP_CWORD]}" out directive line
    out=$(kubectl-alfred __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null) || return
    directive=${out##*:}
    out=${out%:*}
    COMPREPLY=()
    while IFS= read -r line; do
        [[ -n $line ]] && COMPREPLY+=("${line%%$'\t'*}")
    done <<< "$out"
    # Directive 4: no file names; otherwise an empty answer falls back to them.
    if ((${#COMPREPLY[@]} == 0 && (directive & 4) == 0)); then
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
}
complete -F _kubectl_alfred kubectl-alfred
